#include "BindAddress.h"

#include <arpa/inet.h>
#include <c10/util/Exception.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace openreg::ccl {

namespace {

std::string interfaceAddress(const std::string& ifname) {
  ifaddrs* list = nullptr;
  TORCH_CHECK(getifaddrs(&list) == 0, "oreg_ccl: getifaddrs failed: ", std::strerror(errno));
  std::string found;
  for (ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || ifname != a->ifa_name) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
    found = buf;
    break;
  }
  freeifaddrs(list);
  TORCH_CHECK_VALUE(!found.empty(), "oreg_ccl: OREG_CCL_SOCKET_IFNAME=", ifname,
                    " names no interface with an IPv4 address");
  return found;
}

// The local address of the route to `host`.
std::string routeTo(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), "9", &hints, &res);
  TORCH_CHECK(rc == 0 && res, "oreg_ccl: cannot resolve MASTER_ADDR=", host, ": ",
              gai_strerror(rc));
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  std::string out;
  if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t len = sizeof(local);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0) {
      char buf[INET_ADDRSTRLEN];
      inet_ntop(AF_INET, &local.sin_addr, buf, sizeof(buf));
      out = buf;
    }
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(res);
  TORCH_CHECK(!out.empty(), "oreg_ccl: no route to MASTER_ADDR=", host,
              "; set OREG_CCL_SOCKET_IFNAME to the interface to use");
  return out;
}

}  // namespace

std::string bindAddress() {
  if (const char* ifname = std::getenv("OREG_CCL_SOCKET_IFNAME"); ifname && *ifname)
    return interfaceAddress(ifname);
  if (const char* master = std::getenv("MASTER_ADDR"); master && *master) return routeTo(master);
  return "127.0.0.1";
}

}  // namespace openreg::ccl
