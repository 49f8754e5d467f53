#include "Topology.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace openreg::ccl {

std::string hostIdentity() {
  if (const char* id = std::getenv("OREG_CCL_HOST_ID"); id && *id) return std::string("sim:") + id;
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  char ns[128] = {0};
  ssize_t n = readlink("/proc/self/ns/net", ns, sizeof(ns) - 1);
  return std::string(name) + "/" + boot + "/" + (n > 0 ? std::string(ns, n) : "");
}

Topology Topology::singleHost(int rank, int size) {
  Topology t;
  t.rank = rank;
  t.hostOf.assign(size, 0);
  t.hosts.resize(1);
  for (int r = 0; r < size; ++r) t.hosts[0].push_back(r);
  t.hostNames.push_back(hostIdentity());
  return t;
}

Topology Topology::discover(int rank, int size, const Rendezvous& rdv) {
  Topology t;
  t.rank = rank;
  const std::string mine = hostIdentity();
  rdv.set("host/" + std::to_string(rank), mine);
  for (int r = 0; r < size; ++r) {
    std::string name = r == rank ? mine : rdv.get("host/" + std::to_string(r));
    auto it = std::find(t.hostNames.begin(), t.hostNames.end(), name);
    int h = static_cast<int>(it - t.hostNames.begin());
    if (it == t.hostNames.end()) {
      t.hostNames.push_back(name);
      t.hosts.emplace_back();
    }
    t.hostOf.push_back(h);
    t.hosts[h].push_back(r);
  }
  return t;
}

int Topology::localIndex(int r) const {
  const auto& local = hosts[hostOf[r]];
  return static_cast<int>(std::find(local.begin(), local.end(), r) - local.begin());
}

bool Topology::uniform() const {
  for (const auto& h : hosts)
    if (h.size() != hosts[0].size()) return false;
  return true;
}

std::vector<int> Topology::column(int i) const {
  std::vector<int> out;
  for (const auto& h : hosts) out.push_back(h[i]);
  return out;
}

std::vector<int> Topology::leaders() const { return column(0); }

std::string Topology::describe() const {
  std::ostringstream s;
  for (size_t h = 0; h < hosts.size(); ++h) {
    s << (h ? " | " : "") << "host " << h << ":";
    for (int r : hosts[h]) s << " " << r;
  }
  return s.str();
}

}  // namespace openreg::ccl
