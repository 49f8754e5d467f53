// Collective algorithms over the Transport interface (no transport header
// here: shared memory and ZeroMQ run the same code).
//
// Buffers are contiguous host memory; the backend stages device or strided
// tensors before calling in. n = group size, N = bytes of the full buffer.
// Every reduction happens in a fixed order (own contribution, then peers by
// rank), so results are reproducible run to run, and identical on all ranks.
//
//  allreduce, one-shot (N <= OREG_CCL_ONESHOT_BYTES): every rank sends its
//      buffer to every peer and reduces all n buffers itself, in rank order.
//      1 step; each rank sends and receives (n-1) N.
//  allreduce, reduce-scatter + all-gather (larger): rank r owns part r
//      (N/n); it sends part p to rank p, reduces the n copies of its part
//      straight out of the transport, then sends the result to every peer.
//      2 steps; each rank sends and receives 2 (n-1) N / n (bandwidth optimal).
//      The transport streams messages through bounded rings, so both phases
//      are pipelined in ring-sized chunks.
//  broadcast: root sends N to each peer ((n-1) N out of the root).
//  allgather / gather / scatter / alltoall: direct exchange, each rank sends
//      its blocks to their destinations; no data is forwarded twice.
//  reduce_scatter: rank r receives part r from every peer and reduces it.
//  reduce, small: the root receives every buffer and reduces in rank order.
//  reduce, large (as allreduce's threshold), 3+ ranks: reduce-scatter, then the root
//      gathers the reduced parts, so every rank reduces 1/n of the data
//      instead of the root reducing it all.
//  barrier: an empty message from every rank to every rank.
//
// Across hosts (HierarchicalAlgorithms.cpp; c.topology is set):
//  allreduce, small: reduce to the first rank of each host over shared
//      memory, allreduce among those leaders over the network (one-shot up to
//      4 hosts or 8 KiB, one step; else recursive doubling, log2 H steps
//      instead of H-1 messages per leader), broadcast back within each host.
//  allreduce, large, same rank count L on every host: reduce-scatter within
//      the host (local rank i owns part i), ring allreduce of part i among the
//      ranks with local index i on every host (so every rank drives its own
//      network stream, 2 (H-1)/H of its part each), all-gather within the host.
//  broadcast: the root sends once to each other host's first rank, then each
//      host broadcasts over shared memory.
//  reduce: each host reduces to one rank over shared memory (the root on its
//      host, the first rank elsewhere), then those reduce to the root over
//      the network: one buffer per remote host crosses, not one per rank.
//  allgather, same rank count on every host: exchange blocks within the
//      column (the ranks with this local index, one per host) over the
//      network, then hand the column's blocks to every local peer. Each rank
//      sends (H-1) blocks over the network instead of (H-1) L.
//  reduce_scatter, same rank count on every host: within the host, local
//      rank i sums, for every host, the part of that host's rank i; then the
//      column exchanges those host sums over the network ((H-1) parts out of
//      each rank instead of (H-1) L).
//  gather / scatter, blocks up to OREG_CCL_ONESHOT_BYTES: each host's blocks
//      meet at one rank over shared memory (the root on its host, the first
//      rank elsewhere) and cross the network as one message per host instead
//      of one per rank; larger blocks go direct (one sender per rank keeps
//      several network streams busy, and the bundle would cost a copy).
//  alltoall with equal blocks up to 4 KiB: blocks within a
//      host go direct; those for other hosts meet at the host's first rank
//      and cross as one message per pair of hosts (H (H-1) network messages
//      instead of n (n - L)); the far host's first rank hands them out. The
//      bytes crossing are the same either way, so larger blocks go direct.
//      Uneven splits go direct too: only a block's two ends know its size,
//      so for every rank to pick the same path they would first need an
//      agreement round, which costs about what the leaders save.
//  The other collectives use the direct algorithms above on the routed
//  transport (each message takes shared memory or the network by destination).
#pragma once

#include <c10/core/ScalarType.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "Reduce.h"
#include "Topology.h"
#include "Transport.h"

namespace openreg::ccl {

// One collective call: its identity on the wire and its deadline.
struct Collective {
  Transport& transport;
  uint64_t tag;          // the group's collective sequence number
  std::string what;      // e.g. "allreduce#4 1024 x Float SUM", compared across ranks
  Clock::time_point deadline;
  const Topology* topology = nullptr;  // set only when the group spans hosts

  // The same call on a subset of the ranks (a TransportView).
  Collective on(Transport& view) const { return {view, tag, what, deadline, nullptr}; }

  int rank() const { return transport.rank(); }
  int size() const { return transport.size(); }
  RequestPtr send(int peer, const void* data, size_t bytes);
  RequestPtr recvInto(int peer, void* data, size_t bytes);
  RequestPtr recvReduce(int peer, void* acc, size_t count, c10::ScalarType dtype, ReduceKind op);
  // acc = op(own, received), piece by piece.
  RequestPtr recvReduceOnto(int peer, void* acc, const void* own, size_t count,
                            c10::ScalarType dtype, ReduceKind op);
  void wait(const RequestPtr& req);
  void waitAll(const std::vector<RequestPtr>& reqs);
};

// Part p of `count` elements split n ways: [begin, begin + len).
struct Part {
  size_t begin, len;
};
inline Part partOf(size_t count, int n, int p) {
  size_t base = count / n, extra = count % n;
  size_t begin = p * base + std::min<size_t>(p, extra);
  return {begin, base + (size_t(p) < extra ? 1 : 0)};
}

// The two halves of a bandwidth-optimal allreduce, in place: afterwards rank
// r's part r of `buf` holds the reduction / every part holds its owner's.
void reduceScatterInPlace(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                          ReduceKind op);
void allgatherInPlace(Collective& c, void* buf, size_t count, size_t elem);

void allreduce(Collective& c, void* buf, size_t count, c10::ScalarType dtype, ReduceKind op);
// allreduce ignoring the topology (one-shot or reduce-scatter + all-gather by size).
void allreduceFlat(Collective& c, void* buf, size_t count, c10::ScalarType dtype, ReduceKind op);
// Ring reduce-scatter + all-gather: n-1 steps each, one neighbour per step,
// so each link carries 2 (n-1)/n N; for the network, where links are scarce.
void allreduceRing(Collective& c, void* buf, size_t count, c10::ScalarType dtype, ReduceKind op);
// Recursive doubling (a butterfly: log2 n steps, each exchanging the whole
// buffer with one partner; a rank count that is not a power of two first
// folds the extra ranks into their neighbours). For small messages among many
// ranks, where one-shot's n-1 messages per rank cost more than log2 n steps.
void allreduceRecursiveDoubling(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                                ReduceKind op);
void allreduceHierarchical(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                           ReduceKind op);
void broadcastHierarchical(Collective& c, void* buf, size_t bytes, int root);
void reduceHierarchical(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                        ReduceKind op, int root);
void allgatherHierarchical(Collective& c, const void* in, void* out, size_t bytes);
void reduceScatterHierarchical(Collective& c, const void* in, void* out, size_t count,
                               c10::ScalarType dtype, ReduceKind op);
void broadcast(Collective& c, void* buf, size_t bytes, int root);
// out holds n blocks of `bytes`; block r may already hold (alias) `in`.
void allgather(Collective& c, const void* in, void* out, size_t bytes);
// in holds n parts of `count` elements; part r reduced across ranks lands in out.
void reduceScatter(Collective& c, const void* in, void* out, size_t count, c10::ScalarType dtype,
                   ReduceKind op);
void reduce(Collective& c, void* buf, size_t count, c10::ScalarType dtype, ReduceKind op, int root);
// Block p of `in` (sendBytes[p] at sendOffsets[p]) goes to rank p; block q of
// `out` receives recvBytes[q] from rank q.
void alltoall(Collective& c, const char* in, const std::vector<size_t>& sendOffsets,
              const std::vector<size_t>& sendBytes, char* out,
              const std::vector<size_t>& recvOffsets, const std::vector<size_t>& recvBytes);
// Whether equal blocks of `bytes` go through each host's first rank
// (alltoallHierarchical: across hosts, blocks up to 4 KiB); otherwise
// alltoall's direct exchange serves them.
bool alltoallIsHierarchical(bool multiHost, size_t bytes);
// Equal blocks: block p of `in` goes to rank p, block q of `out` comes from
// rank q, `bytes` each; every rank passes the same.
void alltoallHierarchical(Collective& c, const char* in, char* out, size_t bytes);
// `blocks[q]` receives rank q's `bytes` (only used on the root).
void gather(Collective& c, const void* in, const std::vector<char*>& blocks, size_t bytes,
            int root);
void gatherHierarchical(Collective& c, const void* in, const std::vector<char*>& blocks,
                        size_t bytes, int root);
// Rank q receives `blocks[q]` (only used on the root).
void scatter(Collective& c, const std::vector<const char*>& blocks, void* out, size_t bytes,
             int root);
void scatterHierarchical(Collective& c, const std::vector<const char*>& blocks, void* out,
                         size_t bytes, int root);
void barrier(Collective& c);

}  // namespace openreg::ccl
