#include "Algorithms.h"

#include <c10/util/Exception.h>

#include <cstring>

#include "Config.h"
#include "Copy.h"
#include "Errors.h"

namespace openreg::ccl {

namespace {

// An exception is about to leave an algorithm whose frames own buffers that
// requests still in flight point into (staging copies, scratch): libzmq's I/O
// thread sends them without copying, a peer may be reading them single-copy.
// Fail the group and let the transport stop touching them *before* unwinding
// frees them (the backend's own handler runs only after).
template <typename F>
auto quiescedOnThrow(Transport& t, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (...) {
    t.cancel(messageOf(std::current_exception()), /*propagate=*/true);
    t.quiesce();
    throw;
  }
}

}  // namespace

RequestPtr Collective::send(int peer, const void* data, size_t bytes) {
  return quiescedOnThrow(transport, [&] {
    return transport.isend(Channel::kCollective, peer, tag, what, data, bytes);
  });
}

RequestPtr Collective::recvInto(int peer, void* data, size_t bytes) {
  char* base = static_cast<char*>(data);
  return quiescedOnThrow(transport, [&] {
    return transport.irecv(
        Channel::kCollective, peer, tag, what, bytes,
        [base](const void* piece, size_t off, size_t n) { std::memcpy(base + off, piece, n); },
        data);
  });
}

RequestPtr Collective::recvReduce(int peer, void* acc, size_t count, c10::ScalarType dtype,
                                  ReduceKind op) {
  char* base = static_cast<char*>(acc);
  size_t elem = c10::elementSize(dtype);
  // Pieces start at multiples of kPieceAlign, so they split no element.
  return quiescedOnThrow(transport, [&] {
    return transport.irecv(Channel::kCollective, peer, tag, what, count * elem,
                           [=](const void* piece, size_t off, size_t n) {
                             reduceInto(base + off, piece, n / elem, dtype, op);
                           });
  });
}

RequestPtr Collective::recvReduceOnto(int peer, void* acc, const void* own, size_t count,
                                      c10::ScalarType dtype, ReduceKind op) {
  char* base = static_cast<char*>(acc);
  const char* mine = static_cast<const char*>(own);
  size_t elem = c10::elementSize(dtype);
  return quiescedOnThrow(transport, [&] {
    return transport.irecv(Channel::kCollective, peer, tag, what, count * elem,
                           [=](const void* piece, size_t off, size_t n) {
                             std::memcpy(base + off, mine + off, n);  // still in cache for the sum
                             reduceInto(base + off, piece, n / elem, dtype, op);
                           });
  });
}

void Collective::wait(const RequestPtr& req) {
  quiescedOnThrow(transport, [&] { waitFor(transport, req, deadline, what); });
}

void Collective::waitAll(const std::vector<RequestPtr>& reqs) {
  for (const auto& r : reqs) wait(r);
}

namespace {

// Rank r's part of `buf` reduced across ranks: in place, or, with `aside`,
// into aside (starting from its own contribution) leaving `buf` unchanged.
void reduceOwnPart(Collective& c, void* buf, size_t count, c10::ScalarType dtype, ReduceKind op,
                   char* aside) {
  const int n = c.size(), r = c.rank();
  const size_t elem = c10::elementSize(dtype);
  char* base = static_cast<char*>(buf);
  const Part mine = partOf(count, n, r);
  std::vector<RequestPtr> sends;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    Part part = partOf(count, n, p);
    sends.push_back(c.send(p, base + part.begin * elem, part.len * elem));
  }
  char* own = base + mine.begin * elem;
  bool first = aside != nullptr;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    c.wait(first ? c.recvReduceOnto(q, aside, own, mine.len, dtype, op)
                 : c.recvReduce(q, aside ? aside : own, mine.len, dtype, op));
    first = false;
  }
  c.waitAll(sends);  // before anyone overwrites the parts they read
}

// reduce, large: every rank reduces its part, then the root gathers them.
void reduceScatterGather(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                         ReduceKind op, int root) {
  const int n = c.size(), r = c.rank();
  const size_t elem = c10::elementSize(dtype);
  char* base = static_cast<char*>(buf);
  const Part mine = partOf(count, n, r);
  // Reduce leaves the other ranks' buffers alone: they sum their part aside.
  std::unique_ptr<char[]> aside(r == root ? nullptr : new char[mine.len * elem]);
  reduceOwnPart(c, buf, count, dtype, op, aside.get());
  if (r != root) return c.wait(c.send(root, aside.get(), mine.len * elem));
  std::vector<RequestPtr> recvs;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    Part part = partOf(count, n, q);
    recvs.push_back(c.recvInto(q, base + part.begin * elem, part.len * elem));
  }
  c.waitAll(recvs);
}

}  // namespace

void reduceScatterInPlace(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                          ReduceKind op) {
  reduceOwnPart(c, buf, count, dtype, op, nullptr);
}

void allgatherInPlace(Collective& c, void* buf, size_t count, size_t elem) {
  const int n = c.size(), r = c.rank();
  char* base = static_cast<char*>(buf);
  const Part mine = partOf(count, n, r);
  std::vector<RequestPtr> sends, recvs;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    Part part = partOf(count, n, p);
    sends.push_back(c.send(p, base + mine.begin * elem, mine.len * elem));
    recvs.push_back(c.recvInto(p, base + part.begin * elem, part.len * elem));
  }
  c.waitAll(recvs);
  c.waitAll(sends);
}

namespace {

void allreduceOneShot(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                      ReduceKind op) {
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * c10::elementSize(dtype);
  std::vector<RequestPtr> sends;
  for (int p = 0; p < n; ++p)
    if (p != r) sends.push_back(c.send(p, buf, bytes));
  // Reduce in rank order into a scratch buffer: every rank performs the same
  // operations in the same order, so all ranks get bit-identical results.
  std::vector<char> acc(bytes);
  for (int q = 0; q < n; ++q) {
    if (q == r) {
      if (q == 0) std::memcpy(acc.data(), buf, bytes);
      else reduceInto(acc.data(), buf, count, dtype, op);
    } else if (q == 0) {
      c.wait(c.recvInto(q, acc.data(), bytes));
    } else {
      c.wait(c.recvReduce(q, acc.data(), count, dtype, op));
    }
  }
  c.waitAll(sends);  // `buf` is read by the sends until they complete
  std::memcpy(buf, acc.data(), bytes);
}

void allreduceReduceScatterAllgather(Collective& c, void* buf, size_t count,
                                     c10::ScalarType dtype, ReduceKind op) {
  reduceScatterInPlace(c, buf, count, dtype, op);
  allgatherInPlace(c, buf, count, c10::elementSize(dtype));
}

}  // namespace

void allreduceRing(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                   ReduceKind op) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  const size_t elem = c10::elementSize(dtype);
  char* base = static_cast<char*>(buf);
  const int right = (r + 1) % n, left = (r + n - 1) % n;
  auto at = [&](int p) { return partOf(count, n, ((p % n) + n) % n); };
  // Reduce-scatter: after step s, part r-s-1 holds s+2 contributions; rank r
  // ends up owning the full sum of part r+1.
  for (int s = 0; s < n - 1; ++s) {
    Part out = at(r - s), in = at(r - s - 1);
    auto send = c.send(right, base + out.begin * elem, out.len * elem);
    c.wait(c.recvReduce(left, base + in.begin * elem, in.len, dtype, op));
    c.wait(send);
  }
  // All-gather: pass the finished parts around the ring.
  for (int s = 0; s < n - 1; ++s) {
    Part out = at(r + 1 - s), in = at(r - s);
    auto send = c.send(right, base + out.begin * elem, out.len * elem);
    c.wait(c.recvInto(left, base + in.begin * elem, in.len * elem));
    c.wait(send);
  }
}

void allreduceRecursiveDoubling(Collective& c, void* buf, size_t count, c10::ScalarType dtype,
                                ReduceKind op) {
  const int n = c.size(), r = c.rank();
  if (n == 1) return;
  const size_t bytes = count * c10::elementSize(dtype);
  int pow2 = 1;
  while (pow2 * 2 <= n) pow2 *= 2;
  const int extra = n - pow2;
  // The first 2*extra ranks pair up: the even one hands its buffer to the odd
  // one and sits out, so a power of two of ranks remains.
  if (r < 2 * extra && r % 2 == 0) {
    c.wait(c.send(r + 1, buf, bytes));
    return c.wait(c.recvInto(r + 1, buf, bytes));
  }
  if (r < 2 * extra) c.wait(c.recvReduce(r - 1, buf, count, dtype, op));
  const int me = r < 2 * extra ? r / 2 : r - extra;
  auto rankOf = [&](int v) { return v < extra ? 2 * v + 1 : v + extra; };
  std::vector<char> theirs(bytes);
  for (int mask = 1; mask < pow2; mask <<= 1) {
    const int peer = rankOf(me ^ mask);
    auto send = c.send(peer, buf, bytes);
    c.wait(c.recvInto(peer, theirs.data(), bytes));
    c.wait(send);  // `buf` is read until then
    // Both partners compute op(lower half, upper half), so every rank ends
    // with the same bits (MIN/MAX of +0/-0 or of NaNs depend on the order).
    if (me < (me ^ mask)) {
      reduceInto(buf, theirs.data(), count, dtype, op);
    } else {
      reduceInto(theirs.data(), buf, count, dtype, op);
      std::memcpy(buf, theirs.data(), bytes);
    }
  }
  if (r < 2 * extra) c.wait(c.send(r - 1, buf, bytes));
}

void allreduce(Collective& c, void* buf, size_t count, c10::ScalarType dtype, ReduceKind op) {
  if (c.size() == 1) return;
  if (c.topology) return allreduceHierarchical(c, buf, count, dtype, op);
  allreduceFlat(c, buf, count, dtype, op);
}

void allreduceFlat(Collective& c, void* buf, size_t count, c10::ScalarType dtype, ReduceKind op) {
  if (c.size() == 1) return;
  if (count * c10::elementSize(dtype) <= config().oneShotBytes || count < size_t(c.size()))
    allreduceOneShot(c, buf, count, dtype, op);
  else
    allreduceReduceScatterAllgather(c, buf, count, dtype, op);
}

void broadcast(Collective& c, void* buf, size_t bytes, int root) {
  if (c.topology) return broadcastHierarchical(c, buf, bytes, root);
  if (c.rank() != root) return c.wait(c.recvInto(root, buf, bytes));
  std::vector<RequestPtr> sends;
  for (int p = 0; p < c.size(); ++p)
    if (p != root) sends.push_back(c.send(p, buf, bytes));
  c.waitAll(sends);
}

void allgather(Collective& c, const void* in, void* out, size_t bytes) {
  if (c.topology && c.topology->uniform()) return allgatherHierarchical(c, in, out, bytes);
  const int n = c.size(), r = c.rank();
  char* o = static_cast<char*>(out);
  if (o + r * bytes != in) copyMessage(o + r * bytes, in, bytes, bytes);
  std::vector<RequestPtr> reqs;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    reqs.push_back(c.send(p, in, bytes));
    reqs.push_back(c.recvInto(p, o + p * bytes, bytes));
  }
  c.waitAll(reqs);
}

void reduceScatter(Collective& c, const void* in, void* out, size_t count, c10::ScalarType dtype,
                   ReduceKind op) {
  if (c.topology && c.topology->uniform())
    return reduceScatterHierarchical(c, in, out, count, dtype, op);
  const int n = c.size(), r = c.rank();
  const size_t bytes = count * c10::elementSize(dtype);
  const char* i = static_cast<const char*>(in);
  std::vector<RequestPtr> sends;
  for (int p = 0; p < n; ++p)
    if (p != r) sends.push_back(c.send(p, i + p * bytes, bytes));
  std::memcpy(out, i + r * bytes, bytes);
  for (int q = 0; q < n; ++q)
    if (q != r) c.wait(c.recvReduce(q, out, count, dtype, op));
  c.waitAll(sends);
}

void reduce(Collective& c, void* buf, size_t count, c10::ScalarType dtype, ReduceKind op, int root) {
  if (c.topology) return reduceHierarchical(c, buf, count, dtype, op, root);
  // At two ranks the root reduces half either way (measured: no gain).
  if (c.size() > 2 && count * c10::elementSize(dtype) > config().oneShotBytes)
    return reduceScatterGather(c, buf, count, dtype, op, root);
  if (c.rank() != root)
    return c.wait(c.send(root, buf, count * c10::elementSize(dtype)));
  for (int q = 0; q < c.size(); ++q)
    if (q != root) c.wait(c.recvReduce(q, buf, count, dtype, op));
}


void alltoall(Collective& c, const char* in, const std::vector<size_t>& sendOffsets,
              const std::vector<size_t>& sendBytes, char* out,
              const std::vector<size_t>& recvOffsets, const std::vector<size_t>& recvBytes) {
  const int n = c.size(), r = c.rank();
  TORCH_CHECK(sendBytes[r] == recvBytes[r], "oreg_ccl: alltoall: rank ", r, " sends itself ",
              sendBytes[r], " bytes but expects ", recvBytes[r]);
  copyMessage(out + recvOffsets[r], in + sendOffsets[r], sendBytes[r], sendBytes[r]);
  std::vector<RequestPtr> reqs;
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    reqs.push_back(c.send(p, in + sendOffsets[p], sendBytes[p]));
    reqs.push_back(c.recvInto(p, out + recvOffsets[p], recvBytes[p]));
  }
  c.waitAll(reqs);
}

bool alltoallIsHierarchical(bool multiHost, size_t bytes) {
  // Measured at 2 hosts x 2 ranks: through the leaders 20-25% faster for
  // blocks of 256 B - 2 KiB, 20% slower at 16 KiB (the leaders' copies).
  constexpr size_t kHierarchicalAlltoallBytes = 4 << 10;
  return multiHost && bytes > 0 && bytes <= kHierarchicalAlltoallBytes;
}

void gather(Collective& c, const void* in, const std::vector<char*>& blocks, size_t bytes,
            int root) {
  if (c.topology && bytes <= config().oneShotBytes)
    return gatherHierarchical(c, in, blocks, bytes, root);
  if (c.rank() != root) return c.wait(c.send(root, in, bytes));
  if (bytes) std::memmove(blocks[root], in, bytes);  // the root's input may be its own block
  std::vector<RequestPtr> recvs;
  for (int q = 0; q < c.size(); ++q)
    if (q != root) recvs.push_back(c.recvInto(q, blocks[q], bytes));
  c.waitAll(recvs);
}

void scatter(Collective& c, const std::vector<const char*>& blocks, void* out, size_t bytes,
             int root) {
  if (c.topology && bytes <= config().oneShotBytes)
    return scatterHierarchical(c, blocks, out, bytes, root);
  if (c.rank() != root) return c.wait(c.recvInto(root, out, bytes));
  // Sends first: receivers start reading their blocks while we copy our own.
  std::vector<RequestPtr> sends;
  for (int p = 0; p < c.size(); ++p)
    if (p != root) sends.push_back(c.send(p, blocks[p], bytes));
  if (bytes) std::memmove(out, blocks[root], bytes);
  c.waitAll(sends);
}

void barrier(Collective& c) {
  std::vector<RequestPtr> reqs;
  for (int p = 0; p < c.size(); ++p) {
    if (p == c.rank()) continue;
    reqs.push_back(c.send(p, nullptr, 0));
    reqs.push_back(c.recvInto(p, nullptr, 0));
  }
  c.waitAll(reqs);
}

}  // namespace openreg::ccl
