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
//  reduce: the root receives every buffer and reduces in rank order.
//  barrier: an empty message from every rank to every rank.
#pragma once

#include <c10/core/ScalarType.h>

#include <string>
#include <vector>

#include "Reduce.h"
#include "Transport.h"

namespace openreg::ccl {

// One collective call: its identity on the wire and its deadline.
struct Collective {
  Transport& transport;
  uint64_t tag;          // the group's collective sequence number
  std::string what;      // e.g. "allreduce#4 float32[1024] SUM", compared across ranks
  Clock::time_point deadline;

  int rank() const { return transport.rank(); }
  int size() const { return transport.size(); }
  RequestPtr send(int peer, const void* data, size_t bytes);
  RequestPtr recvInto(int peer, void* data, size_t bytes);
  RequestPtr recvReduce(int peer, void* acc, size_t count, c10::ScalarType dtype, ReduceKind op);
  void wait(const RequestPtr& req);
  void waitAll(const std::vector<RequestPtr>& reqs);
};

void allreduce(Collective& c, void* buf, size_t count, c10::ScalarType dtype, ReduceKind op);
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
// `out` (n blocks) is only used on the root.
void gather(Collective& c, const void* in, void* out, size_t bytes, int root);
// `in` (n blocks) is only used on the root.
void scatter(Collective& c, const void* in, void* out, size_t bytes, int root);
void barrier(Collective& c);

}  // namespace openreg::ccl
