// Collectives of a group that spans hosts: shared memory within a host, the
// network between hosts (the steps are described in Algorithms.h).
#include <algorithm>
#include <cstring>
#include <vector>

#include "Algorithms.h"
#include "Config.h"
#include "TransportView.h"

namespace openreg::ccl {

// Small allreduce among the host leaders: one-shot (one step, H-1 messages
// per leader) up to 4 hosts and for tiny messages; recursive doubling (log2 H
// steps, one message each) beyond. Measured at 5 and 8 simulated hosts: 1 KiB
// one-shot ~20% faster, 8 KiB even, 64 KiB recursive doubling ~10% faster.
constexpr int kOneShotHosts = 4;
constexpr size_t kTinyBytes = 8 << 10;

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
    // (Large messages come here only on hosts with unequal rank counts:
    // allreduceFlat then picks reduce-scatter + all-gather.)
    if (leaders.size() > kOneShotHosts && count * elem > kTinyBytes &&
        count * elem <= config().oneShotBytes)
      allreduceRecursiveDoubling(ld, buf, count, dtype, op);
    else
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

void reduceHierarchical(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                        ReduceKind op, int root) {
  const Topology& t = *c.topology;
  const int rootHost = t.hostOf[root];
  // Each host reduces to one rank over shared memory (the root on its own
  // host, the first rank elsewhere); those then reduce to the root over the
  // network.
  std::vector<int> leaders = t.leaders();
  leaders[rootHost] = root;
  const int leader = leaders[t.host()];
  // reduce leaves every buffer but the root's unchanged: another host's
  // leader sums its host into a copy of its own (alone on its host, it only
  // sends, as reduce's non-root ranks do).
  std::vector<char> copy;
  void* acc = buf;
  if (c.rank() == leader && leader != root && t.localRanks().size() > 1) {
    const char* b = static_cast<const char*>(buf);
    copy.assign(b, b + count * c10::elementSize(dtype));
    acc = copy.data();
  }
  TransportView local(c.transport, t.localRanks());
  Collective lc = c.on(local);
  reduce(lc, acc, count, dtype, op, t.localIndex(leader));
  if (c.rank() != leader) return;
  TransportView across(c.transport, leaders);
  Collective xc = c.on(across);
  reduce(xc, acc, count, dtype, op, rootHost);
}

void allgatherHierarchical(Collective& c, const void* in, void* out, size_t bytes) {
  const Topology& t = *c.topology;
  const int r = c.rank();
  char* o = static_cast<char*>(out);
  if (o + r * bytes != in) std::memcpy(o + r * bytes, in, bytes);
  // Across hosts, only within this rank's column: one block per remote host.
  const std::vector<int> column = t.column(t.localIndex());
  std::vector<RequestPtr> reqs;
  for (int q : column) {
    if (q == r) continue;
    reqs.push_back(c.send(q, in, bytes));
    reqs.push_back(c.recvInto(q, o + q * bytes, bytes));
  }
  c.waitAll(reqs);
  reqs.clear();
  // Within the host: hand this column's blocks to every local peer, take theirs.
  for (int p : t.localRanks()) {
    if (p == r) continue;
    for (int q : column) reqs.push_back(c.send(p, o + q * bytes, bytes));
    for (int q : t.column(t.localIndex(p))) reqs.push_back(c.recvInto(p, o + q * bytes, bytes));
  }
  c.waitAll(reqs);
}

void reduceScatterHierarchical(Collective& c, const void* in, void* out, size_t count,
                               c10::ScalarType dtype, ReduceKind op) {
  const Topology& t = *c.topology;
  const int r = c.rank();
  const size_t bytes = count * c10::elementSize(dtype);
  const char* i = static_cast<const char*>(in);
  // Within the host: local peer p sums, per host, the part of p's column.
  std::vector<RequestPtr> sends;
  for (int p : t.localRanks()) {
    if (p == r) continue;
    for (int q : t.column(t.localIndex(p))) sends.push_back(c.send(p, i + q * bytes, bytes));
  }
  const std::vector<int> column = t.column(t.localIndex());
  std::vector<char> partial(column.size() * bytes);
  for (size_t k = 0; k < column.size(); ++k)
    std::memcpy(partial.data() + k * bytes, i + column[k] * bytes, bytes);
  for (int p : t.localRanks()) {
    if (p == r) continue;
    // Each peer's parts land in distinct slots; peers take turns (fixed order).
    std::vector<RequestPtr> recvs;
    for (size_t k = 0; k < column.size(); ++k)
      recvs.push_back(c.recvReduce(p, partial.data() + k * bytes, count, dtype, op));
    c.waitAll(recvs);
  }
  // Across hosts: column peer q gets this host's sum of its part.
  size_t own = 0;
  for (size_t k = 0; k < column.size(); ++k) {
    if (column[k] == r) own = k;
    else sends.push_back(c.send(column[k], partial.data() + k * bytes, bytes));
  }
  std::memcpy(out, partial.data() + own * bytes, bytes);
  for (int q : column)
    if (q != r) c.wait(c.recvReduce(q, out, count, dtype, op));
  c.waitAll(sends);  // `partial` and `in` are read until then
}

namespace {

// Host h's blocks travel as one message, in the order of its ranks.
size_t bundleBytes(const Topology& t, int h, size_t bytes) { return t.hosts[h].size() * bytes; }

// This rank's side of a host-by-host gather or scatter: its host's leader,
// which collects or hands out the host's blocks (the root on the root's host,
// the first rank elsewhere), and on a remote host's leader the bundle.
struct ByHost {
  const Topology& t;
  TransportView local;
  Collective lc;
  bool rootHost;
  int leader;
  std::vector<char> bundle;  // filled on a remote host's leader only

  ByHost(Collective& c, int root, size_t bytes)
      : t(*c.topology),
        local(c.transport, t.localRanks()),
        lc(c.on(local)),
        rootHost(t.host() == t.hostOf[root]),
        leader(rootHost ? root : t.localRanks()[0]),
        bundle(!rootHost && c.rank() == leader ? bundleBytes(t, t.host(), bytes) : 0) {}

  // Where each local rank's block lies in the bundle.
  template <typename Ptr>
  std::vector<Ptr> parts(size_t bytes) {
    std::vector<Ptr> p;
    for (size_t i = 0; i < t.localRanks().size(); ++i) p.push_back(bundle.data() + i * bytes);
    return p;
  }
};

}  // namespace

void gatherHierarchical(Collective& c, const void* in, const std::vector<char*>& blocks,
                        size_t bytes, int root) {
  ByHost h(c, root, bytes);
  const Topology& t = h.t;
  if (!h.rootHost) {
    // Collect this host's blocks, then send them to the root in one message.
    gather(h.lc, in, h.parts<char*>(bytes), bytes, t.localIndex(h.leader));
    if (c.rank() == h.leader) c.wait(c.send(root, h.bundle.data(), h.bundle.size()));
    return;
  }
  // The root receives each remote host's bundle straight into that host's
  // blocks (a piece may span blocks), while its own host gathers locally.
  std::vector<RequestPtr> recvs;
  if (c.rank() == root) {
    for (size_t host = 0; host < t.hosts.size(); ++host) {
      if (int(host) == t.host()) continue;
      const std::vector<int>& ranks = t.hosts[host];
      auto sink = [&blocks, ranks, bytes](const void* data, size_t off, size_t n) {
        const char* from = static_cast<const char*>(data);
        while (n) {
          const size_t i = off / bytes, at = off % bytes, k = std::min(n, bytes - at);
          std::memcpy(blocks[ranks[i]] + at, from, k);
          from += k, off += k, n -= k;
        }
      };
      recvs.push_back(c.transport.irecv(Channel::kCollective, ranks[0], c.tag, c.what,
                                        bundleBytes(t, int(host), bytes), sink));
    }
  }
  std::vector<char*> parts;
  for (int q : t.localRanks()) parts.push_back(c.rank() == root ? blocks[q] : nullptr);
  gather(h.lc, in, parts, bytes, t.localIndex(root));
  c.waitAll(recvs);
}

void scatterHierarchical(Collective& c, const std::vector<const char*>& blocks, void* out,
                         size_t bytes, int root) {
  ByHost h(c, root, bytes);
  const Topology& t = h.t;
  if (!h.rootHost) {
    // Receive this host's blocks in one message, then hand them out locally.
    if (c.rank() == h.leader) c.wait(c.recvInto(root, h.bundle.data(), h.bundle.size()));
    return scatter(h.lc, h.parts<const char*>(bytes), out, bytes, t.localIndex(h.leader));
  }
  // The root packs each remote host's blocks into one message (small: see
  // the caller), then scatters within its own host.
  std::vector<std::vector<char>> bundles;
  std::vector<RequestPtr> sends;
  if (c.rank() == root) {
    bundles.reserve(t.hosts.size());
    for (size_t host = 0; host < t.hosts.size(); ++host) {
      if (int(host) == t.host()) continue;
      const std::vector<int>& ranks = t.hosts[host];
      bundles.emplace_back(bundleBytes(t, int(host), bytes));
      for (size_t i = 0; i < ranks.size(); ++i)
        if (bytes) std::memcpy(bundles.back().data() + i * bytes, blocks[ranks[i]], bytes);
      sends.push_back(c.send(ranks[0], bundles.back().data(), bundles.back().size()));
    }
  }
  std::vector<const char*> parts;
  for (int q : t.localRanks()) parts.push_back(c.rank() == root ? blocks[q] : nullptr);
  scatter(h.lc, parts, out, bytes, t.localIndex(root));
  c.waitAll(sends);
}

}  // namespace openreg::ccl

namespace openreg::ccl {

// Equal blocks of `bytes`, so every rank knows every block's size. Blocks
// between ranks of one host go direct over shared memory; blocks for other
// hosts meet at each host's first rank (its leader), cross the network as one
// message per pair of hosts instead of one per pair of ranks, and are handed
// out on the far side. Every packed buffer lists the other hosts' ranks in
// host order (`remotes`).
void alltoallHierarchical(Collective& c, const char* in, char* out, size_t bytes) {
  const Topology& t = *c.topology;
  const std::vector<int>& mine = t.localRanks();
  const size_t L = mine.size();
  std::vector<int> remotes;
  for (size_t h = 0; h < t.hosts.size(); ++h)
    if (int(h) != t.host()) remotes.insert(remotes.end(), t.hosts[h].begin(), t.hosts[h].end());
  const size_t packedBytes = remotes.size() * bytes;
  TransportView local(c.transport, mine);
  Collective lc = c.on(local);

  std::vector<size_t> offsets(L), sizes(L, bytes);
  for (size_t i = 0; i < L; ++i) offsets[i] = size_t(mine[i]) * bytes;
  alltoall(lc, in, offsets, sizes, out, offsets, sizes);

  std::vector<char> packed(packedBytes);
  for (size_t k = 0; k < remotes.size(); ++k)
    std::memcpy(packed.data() + k * bytes, in + size_t(remotes[k]) * bytes, bytes);
  const bool leader = local.rank() == 0;
  // On the leader: what each local rank sends to, and receives from, the remote ranks.
  std::vector<char> fromLocals(leader ? L * packedBytes : 0), toLocals(leader ? L * packedBytes : 0);
  auto rows = [&](std::vector<char>& b) {
    std::vector<char*> p;
    for (size_t i = 0; i < L; ++i) p.push_back(leader ? b.data() + i * packedBytes : nullptr);
    return p;
  };
  gather(lc, packed.data(), rows(fromLocals), packedBytes, 0);

  if (leader) {
    // Host g's bundle, either way: [rank of the sending host][rank of the receiving host].
    std::vector<std::vector<char>> outgoing, incoming;
    std::vector<RequestPtr> reqs;
    size_t first = 0;  // g's first position in `remotes`
    for (size_t g = 0; g < t.hosts.size(); ++g) {
      if (int(g) == t.host()) continue;
      const size_t Lg = t.hosts[g].size();
      outgoing.emplace_back(L * Lg * bytes);
      incoming.emplace_back(Lg * L * bytes);
      for (size_t i = 0; i < L; ++i)
        std::memcpy(outgoing.back().data() + i * Lg * bytes,
                    fromLocals.data() + i * packedBytes + first * bytes, Lg * bytes);
      reqs.push_back(c.send(t.hosts[g][0], outgoing.back().data(), outgoing.back().size()));
      reqs.push_back(c.recvInto(t.hosts[g][0], incoming.back().data(), incoming.back().size()));
      first += Lg;
    }
    c.waitAll(reqs);
    first = 0;
    size_t bundle = 0;
    for (size_t g = 0; g < t.hosts.size(); ++g) {
      if (int(g) == t.host()) continue;
      const size_t Lg = t.hosts[g].size();
      for (size_t j = 0; j < L; ++j)
        for (size_t i = 0; i < Lg; ++i)
          std::memcpy(toLocals.data() + j * packedBytes + (first + i) * bytes,
                      incoming[bundle].data() + (i * L + j) * bytes, bytes);
      first += Lg;
      ++bundle;
    }
  }
  std::vector<const char*> handOut;
  for (char* p : rows(toLocals)) handOut.push_back(p);
  scatter(lc, handOut, packed.data(), packedBytes, 0);
  for (size_t k = 0; k < remotes.size(); ++k)
    std::memcpy(out + size_t(remotes[k]) * bytes, packed.data() + k * bytes, bytes);
}

}  // namespace openreg::ccl
