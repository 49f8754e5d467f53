// Which local address the ZeroMQ transport binds to.
//
// Never all interfaces: OREG_CCL_SOCKET_IFNAME names the interface (its first
// IPv4 address); otherwise the address this host uses to reach MASTER_ADDR
// (found by "connecting" a UDP socket, which sends nothing); otherwise, with
// no MASTER_ADDR (e.g. a file store on one machine), the loopback address.
#pragma once

#include <string>

namespace openreg::ccl {

std::string bindAddress();

}  // namespace openreg::ccl
