// RoutedTransport: the Transport of a group that spans hosts.
//
// Ranks on this host are reached through shared memory (a ShmTransport over
// the local ranks only), ranks on other hosts through ZeroMQ. The algorithms
// see one transport with the group's rank numbers; this class routes each
// message by destination and waits on both: the ZeroMQ I/O thread rings the
// shared-memory doorbell when something arrives, so one futex sleep covers
// both transports. A receive from any source is posted in both transports
// as two halves of which only the first to match takes a message.
//
// Failures: cancel(propagate) fails the local ranks through the shared-memory
// failure slot and the remote ones with an abort message.
#pragma once

#include <memory>

#include "Topology.h"
#include "Transport.h"

namespace openreg::ccl {

class ShmTransport;
class ZmqTransport;

class RoutedTransport final : public Transport {
 public:
  // Collective over the group.
  RoutedTransport(const Topology& topology, const Rendezvous& rdv,
                  std::chrono::milliseconds timeout);
  ~RoutedTransport() override;

  int rank() const override { return topo_.rank; }
  int size() const override { return topo_.size(); }
  RequestPtr isend(Channel channel, int dst, uint64_t tag, const std::string& what,
                   const void* data, size_t bytes) override;
  RequestPtr irecv(Channel channel, int src, uint64_t tag, const std::string& what, size_t bytes,
                   Sink sink, void* direct = nullptr) override;
  void progress(Clock::time_point until) override { progress(until, until); }
  void progress(Clock::time_point until, Clock::time_point deadline) override;
  void wakeup() override;
  void cancel(const std::string& why, bool propagate) override;
  std::string failure() const override;
  void quiesce() override;
  void awaitPeersFailed(Clock::duration bound) override;
  std::string unreceived(Channel ch) override;
  void shutdown() override;

  const ZmqTransport& zmq() const { return *zmq_; }
  const ShmTransport* shm() const { return shm_.get(); }

 private:
  RequestPtr irecvAnySource(uint64_t tag, const std::string& what, size_t bytes, Sink sink,
                            void* direct);

  const Topology topo_;
  std::shared_ptr<ShmTransport> shm_;  // null when this host runs one rank of the group
  std::shared_ptr<ZmqTransport> zmq_;  // declared last: its I/O thread stops first
};

}  // namespace openreg::ccl
