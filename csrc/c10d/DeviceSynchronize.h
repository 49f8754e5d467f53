// What torch.openreg.synchronize() waits for besides the streams: oreg_ccl's
// operations on openreg tensors, which run on the process groups' workers, not
// on a stream. cudaDeviceSynchronize waits for NCCL's kernels just so, and
// code that times collectives, or reads their outputs after a device
// synchronisation without Work.wait(), relies on it.
#pragma once

#include <memory>

#include "../runtime/driver/Driver.h"
#include "OregWork.h"

namespace openreg::ccl {

// Registers an operation issued on openreg tensors of `device`: the next
// device synchronisation waits until `completion` is set (it always is: on
// success, error, timeout or shutdown), and the race checker learns that the
// host then saw `point`. If the operation fails and nobody called its wait(),
// that synchronisation raises its error (once). Not on a thread that runs a group's operations (in a
// future's callback): the operation may be queued behind that very callback.
void waitAtDeviceSynchronize(int device, std::shared_ptr<OregWork::Completion> completion,
                             orSanitizerPoint point);

}  // namespace openreg::ccl
