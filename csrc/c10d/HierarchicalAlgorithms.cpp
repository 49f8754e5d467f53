// Collectives of a group that spans hosts: shared memory within a host, the
// network between hosts (the steps are described in Algorithms.h).
#include <vector>

#include "Algorithms.h"
#include "Config.h"
#include "TransportView.h"

namespace openreg::ccl {

void allreduceHierarchical(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                           ReduceKind op) {
  const Topology& t = *c.topology;
  const size_t elem = c10::elementSize(dtype);
  TransportView local(c.transport, t.localRanks());
  Collective lc = c.on(local);
  if (t.uniform() && count * elem > config().oneShotBytes && count >= size_t(c.size())) {
    reduceScatterInPlace(lc, buf, count, dtype, op);
    // Local rank i owns part i; its peers with local index i on the other
    // hosts own the same part, so each column reduces one part over the network.
    TransportView column(c.transport, t.column(t.localIndex()));
    Collective cc = c.on(column);
    Part mine = partOf(count, local.size(), local.rank());
    allreduceRing(cc, static_cast<char*>(buf) + mine.begin * elem, mine.len, dtype, op);
    allgatherInPlace(lc, buf, count, elem);
    return;
  }
  reduce(lc, buf, count, dtype, op, /*root=*/0);
  if (local.rank() == 0) {
    TransportView leaders(c.transport, t.leaders());
    Collective ld = c.on(leaders);
    allreduceFlat(ld, buf, count, dtype, op);
  }
  broadcast(lc, buf, count * elem, /*root=*/0);
}

void broadcastHierarchical(Collective& c, void* buf, size_t bytes, int root) {
  const Topology& t = *c.topology;
  TransportView local(c.transport, t.localRanks());
  Collective lc = c.on(local);
  const int rootHost = t.hostOf[root];
  if (t.host() != rootHost) {
    // This host's first rank receives once from the root and fans out locally.
    if (local.rank() == 0) c.wait(c.recvInto(root, buf, bytes));
    return broadcast(lc, buf, bytes, 0);
  }
  std::vector<RequestPtr> sends;
  if (c.rank() == root)
    for (size_t h = 0; h < t.hosts.size(); ++h)
      if (int(h) != rootHost) sends.push_back(c.send(t.hosts[h][0], buf, bytes));
  broadcast(lc, buf, bytes, t.localIndex(root));
  c.waitAll(sends);
}

}  // namespace openreg::ccl
