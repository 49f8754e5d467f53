// Every environment knob of oreg_ccl, read here once (at first use), except the
// host identity and network interface (OREG_CCL_HOST_ID, OREG_CCL_SOCKET_IFNAME),
// read where the topology and the bind address are worked out (Topology.cpp,
// BindAddress.cpp). What each means and its default: README.md, "Environment
// variables" (the one description of them).
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
  bool deviceCheck = envCount("OREG_CCL_DEVICE_CHECK", 1) != 0;
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
