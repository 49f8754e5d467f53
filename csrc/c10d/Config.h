// Every environment knob of oreg_ccl, declared once (read at first use); the
// two host settings at the end are read where the topology and the bind
// address are worked out (Topology.cpp, BindAddress.cpp).
//
//   OREG_CCL_RING_BYTES      per-pair collective ring in shared memory   (default 1 MiB)
//   OREG_CCL_P2P_RING_BYTES  per-pair send/recv ring                     (default 256 KiB)
//   OREG_CCL_SPIN_US         busy-poll time before sleeping in a futex   (default 50 us, or
//                            2 us when the group has more ranks than the machine has cores)
//   OREG_CCL_SINGLE_COPY_BYTES  messages of at least this size (send/recv: only those that do
//                            not fit the p2p ring) between ranks of
//                            one host are read straight from the sender's memory
//                            (process_vm_readv) instead of passing through the ring
//                            (default 256 KiB; 0 = never)
//   OREG_CCL_PEER_MAPPING    a single-copy payload in openreg device memory is copied out of
//                            the sender's device memory mapped into the receiver (the
//                            driver's IPC handles) instead of process_vm_readv (default 1;
//                            0 = never)
//   OREG_CCL_STREAMING_COPY_BYTES  payloads of messages at least this large are copied with
//                            non-temporal stores (Copy.h)                (default 8 MiB; 0 = never)
//   OREG_CCL_ONESHOT_BYTES   the small/large split of the algorithms     (default 64 KiB):
//                            allreduce at or below it is one-shot, above it reduce-scatter +
//                            all-gather; reduce above it on 3+ ranks is reduce-scatter +
//                            gather; across hosts, allreduce above it takes the column
//                            ring and gather/scatter blocks above it go direct
//   OREG_CCL_ZMQ_CHUNK_BYTES messages between hosts travel in chunks of this size, so the
//                            receiver reduces one while the next is on the wire
//                            (default 512 KiB; the same on every rank)
//   OREG_CCL_ZMQ_IO_THREADS  libzmq I/O threads per group: one receives, the others send
//                            (default 2; 1 = one thread does both)
//   OREG_CCL_HOST_ID         this process's host identity (simulated hosts; Topology.h)
//   OREG_CCL_SOCKET_IFNAME   the network interface the ZeroMQ transport binds (BindAddress.h)
#pragma once

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

#include <c10/util/Exception.h>
#include <c10/util/env.h>

namespace openreg::ccl {

// A non-negative integer setting; anything else is the user's typo, named in a
// ValueError (std::stoull's bare "stoull" named nothing; atol read it as 0).
inline size_t envCount(const char* name, size_t fallback) {
  const std::optional<std::string> v = c10::utils::get_env(name);
  if (!v || v->empty()) return fallback;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v->c_str(), &end, 10);
  TORCH_CHECK_VALUE(std::isdigit(static_cast<unsigned char>((*v)[0])) && *end == '\0' && errno == 0,
                    name, " must be a non-negative integer, got '", *v, "'");
  return static_cast<size_t>(n);
}

struct Config {
  size_t collRingBytes = envCount("OREG_CCL_RING_BYTES", 1 << 20);
  size_t p2pRingBytes = envCount("OREG_CCL_P2P_RING_BYTES", 256 << 10);
  size_t singleCopyBytes = envCount("OREG_CCL_SINGLE_COPY_BYTES", 256 << 10);
  bool peerMapping = envCount("OREG_CCL_PEER_MAPPING", 1) != 0;
  size_t streamingCopyBytes = envCount("OREG_CCL_STREAMING_COPY_BYTES", 8 << 20);
  size_t oneShotBytes = envCount("OREG_CCL_ONESHOT_BYTES", 64 << 10);
  size_t zmqChunkBytes = envCount("OREG_CCL_ZMQ_CHUNK_BYTES", 512 << 10);
  int zmqIoThreads =
      static_cast<int>(std::clamp<size_t>(envCount("OREG_CCL_ZMQ_IO_THREADS", 2), 1, 16));
  // -1: choose from the group size (spinning only pays when every rank has a core).
  long spinUs = static_cast<long>(envCount("OREG_CCL_SPIN_US", static_cast<size_t>(-1)));

  long spinUsFor(int groupSize) const {
    if (spinUs >= 0) return spinUs;
    return groupSize <= static_cast<int>(std::thread::hardware_concurrency()) ? 50 : 2;
  }
};

inline const Config& config() {
  static const Config c;
  return c;
}

}  // namespace openreg::ccl
