// TransportView: a subset of a transport's ranks, renumbered 0..k-1.
//
// Hierarchical algorithms run ordinary algorithms on a view: the ranks of one
// host, or one rank per host. Messages go through the parent with the
// parent's rank numbers; waiting, failure, cancel and quiesce are the parent's.
#pragma once

#include <vector>

#include "Transport.h"

namespace openreg::ccl {

class TransportView final : public Transport {
 public:
  // `ranks` are parent ranks and must include the parent's own rank.
  TransportView(Transport& parent, std::vector<int> ranks);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(ranks_.size()); }
  int groupRank(int index) const override { return parent_.groupRank(ranks_.at(index)); }
  RequestPtr isend(Channel channel, int dst, uint64_t tag, const std::string& what,
                   const void* data, size_t bytes) override {
    return parent_.isend(channel, ranks_.at(dst), tag, what, data, bytes);
  }
  RequestPtr irecv(Channel channel, int src, uint64_t tag, const std::string& what, size_t bytes,
                   Sink sink, void* direct = nullptr) override {
    return parent_.irecv(channel, ranks_.at(src), tag, what, bytes, std::move(sink), direct);
  }
  void progress(Clock::time_point until) override { parent_.progress(until); }
  void progress(Clock::time_point until, Clock::time_point deadline) override {
    parent_.progress(until, deadline);
  }
  void wakeup() override { parent_.wakeup(); }
  void cancel(const std::string& why, bool propagate) override { parent_.cancel(why, propagate); }
  void quiesce() override { parent_.quiesce(); }
  std::string failure() const override { return parent_.failure(); }

 private:
  Transport& parent_;
  std::vector<int> ranks_;
  int rank_;
};

}  // namespace openreg::ccl
