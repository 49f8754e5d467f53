// Opening another process's memfd through /proc, as a receiver of shared
// device memory (Memory.cpp) or of shared-storage reference counts
// (../OpenRegIPCTypes.cpp) does. The peer names the file by (pid, fd, inode):
// after a pid or fd number was reused, the file found there is another one,
// so its inode, size and memfd name are checked before it is used.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>

namespace openreg {

// The opened descriptor (O_RDWR | O_CLOEXEC), or -1 with errno set: EINVAL
// when the file there is not the memfd named `memfdName` with that inode and
// size.
inline int openPeerMemfd(int64_t pid, int64_t fd, uint64_t inode, uint64_t bytes,
                         const char* memfdName) {
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int opened = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (opened < 0) return -1;
  struct stat st{};
  char link[96] = {};
  const std::string self = "/proc/self/fd/" + std::to_string(opened);
  const std::string expected = std::string("/memfd:") + memfdName;
  const bool same = fstat(opened, &st) == 0 && S_ISREG(st.st_mode) &&
                    static_cast<uint64_t>(st.st_ino) == inode &&
                    static_cast<uint64_t>(st.st_size) == bytes &&
                    readlink(self.c_str(), link, sizeof(link) - 1) > 0 &&
                    std::strncmp(link, expected.c_str(), expected.size()) == 0;
  if (same) return opened;
  close(opened);
  errno = EINVAL;
  return -1;
}

}  // namespace openreg
