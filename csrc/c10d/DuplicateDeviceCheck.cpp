// NCCL's "Duplicate GPU detected" check for oreg_ccl (OregBackend::checkDistinctDevice).
#include <c10/util/StringUtil.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "Config.h"
#include "Errors.h"
#include "OregBackend.h"

namespace openreg::ccl {

// Two ranks of a host on one device (a script that never calls set_device,
// so every rank uses "openreg", i.e. openreg:0) share one GPU on a real node,
// where NCCL refuses them ("Duplicate GPU detected"); each openreg process
// has devices of its own, so nothing else would show the mistake. At its
// first collective on device tensors a rank publishes its device in the
// store and compares the local peers' already there (no waiting: the last
// of two to publish finds the clash, and fails the group for both). Peers
// not there yet are looked for again at the 2nd, 4th, 8th, ... device
// collective, up to the 2^16th: a peer that never publishes (it passes CPU
// tensors in this group) costs a handful of store round trips, not one per
// call. Devices compare by physical index (orDevicePhysicalIndex), so ranks
// that each see another device as openreg:0 (OPENREG_VISIBLE_DEVICES, as
// CUDA_VISIBLE_DEVICES setups give each rank cuda:0) pass.
// OREG_CCL_DEVICE_CHECK=0 turns the check off.
void OregBackend::checkDistinctDevice(int device) {
  if (deviceCheckDone_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> g(deviceCheckMutex_);
  if (!config().deviceCheck) {
    deviceCheckDone_.store(true, std::memory_order_release);
    return;
  }
  const uint64_t call = ++deviceChecks_;
  if (postedDevice_ >= 0 && (call & (call - 1)) != 0) return;  // not a power of two
  if (call > (uint64_t{1} << 16)) {
    deviceCheckDone_.store(true, std::memory_order_release);
    return;
  }
  const auto key = [this](int r) { return storePrefix_ + "device/" + std::to_string(r); };
  if (postedDevice_ < 0) {
    postedDevice_ = orDevicePhysicalIndex(device);
    for (int r : topology_.localRanks())
      if (r != getRank()) devicePeersUnseen_.push_back(r);
    if (!devicePeersUnseen_.empty()) {
      const std::string mine = std::to_string(postedDevice_);
      store_->set(key(getRank()), std::vector<uint8_t>(mine.begin(), mine.end()));
    }
  }
  for (auto it = devicePeersUnseen_.begin(); it != devicePeersUnseen_.end();) {
    if (!store_->check({key(*it)})) {
      ++it;
      continue;
    }
    const auto theirs = store_->get(key(*it));
    if (std::string(theirs.begin(), theirs.end()) == std::to_string(postedDevice_)) {
      const std::string why = c10::str(
          "oreg_ccl: Duplicate device detected: rank ", getRank(), " and rank ", *it,
          " both on openreg:", device,
          postedDevice_ == device && !std::getenv("OPENREG_VISIBLE_DEVICES")
              ? std::string()
              : c10::str(" (physical device ", postedDevice_, ")"),
          " (ranks of a host need a device each, as on a GPU node: call "
          "torch.openreg.set_device(local_rank) before using \"openreg\")");
      transport_->cancel(why, /*propagate=*/true);
      OREG_CCL_THROW(why, globalRanksNote());
    }
    it = devicePeersUnseen_.erase(it);
  }
  if (devicePeersUnseen_.empty()) deviceCheckDone_.store(true, std::memory_order_release);
}

}  // namespace openreg::ccl
