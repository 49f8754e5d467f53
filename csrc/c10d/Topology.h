// Topology: which ranks of a group share a host.
//
// Ranks on one host talk through shared memory, ranks on different hosts over
// ZeroMQ (see RoutedTransport.h). Every rank publishes its host identity in
// the group's store and reads everyone else's, so all ranks derive the same
// layout. Host identity: OREG_CCL_HOST_ID if set (simulated hosts on one
// machine), else hostname + boot id + network namespace, so two network
// namespaces of one machine count as two hosts, as they would for NCCL.
#pragma once

#include <string>
#include <vector>

#include "Transport.h"

namespace openreg::ccl {

struct Topology {
  int rank = 0;
  std::vector<int> hostOf;                // group rank -> host index (hosts in order of first rank)
  std::vector<std::vector<int>> hosts;    // host index -> its group ranks, ascending
  std::vector<std::string> hostNames;     // host index -> identity string

  static Topology discover(int rank, int size, const Rendezvous& rdv);
  // A group on one host (no store traffic), e.g. for size-1 groups.
  static Topology singleHost(int rank, int size);

  int size() const { return static_cast<int>(hostOf.size()); }
  bool multiHost() const { return hosts.size() > 1; }
  int host() const { return hostOf[rank]; }
  const std::vector<int>& localRanks() const { return hosts[host()]; }
  // Position of `r` among the ranks of its host.
  int localIndex(int r) const;
  int localIndex() const { return localIndex(rank); }
  bool isLocal(int r) const { return hostOf[r] == host(); }
  // Every host runs the same number of ranks.
  bool uniform() const;
  // The ranks with local index `i` on every host, in host order (uniform only).
  std::vector<int> column(int i) const;
  // The first rank of every host, in host order.
  std::vector<int> leaders() const;
  std::string describe() const;
};

// This process's host identity (see the top of this file).
std::string hostIdentity();

}  // namespace openreg::ccl
