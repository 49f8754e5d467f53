// The race checker: happens-before over streams with vector clocks, as
// torch.cuda._sanitizer (CSAN) does for CUDA, but over device memory byte
// ranges rather than tensor lifetimes, so a block reused by the caching
// allocator while another stream still used it is a race too.
//
// Each lane (a stream, or an off-stream sequence such as a process group's
// collectives) has a vector clock: entry L is how many of lane L's launches
// it is ordered after. A launch ticks its own entry; an event record copies
// the clock; a wait for the event merges it in; a host synchronisation merges
// the stream's clock into the host's, which every later launch merges in
// (the host launched it after seeing that work end). Memory is a map of
// disjoint byte segments, each with its last write and the reads since; an
// access races with an entry of another lane that its clock does not cover.
//
// Everything runs on the launching thread, under one mutex, only while the
// checker is on; off, a launch costs one relaxed load.
#include "Internal.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

namespace openreg {

struct orSanitizerClock {
  std::vector<uint64_t> ticks;  // index: lane
};

namespace {

using Ticks = std::vector<uint64_t>;

struct Tick {
  int lane = -1;  // -1: none
  uint64_t tick = 0;
  const char* what = nullptr;  // the access's operation, for reports
};

struct Segment {
  uintptr_t end = 0;
  Tick write;               // the last write
  std::vector<Tick> reads;  // since then, the latest per lane
};

struct Lane {
  std::string label;
  bool stream = true;  // a stream's kernels, or a lane's operations
  Ticks clock;
};

bool enabledByEnvironment() {
  const char* env = std::getenv("OPENREG_SANITIZER");
  return env && std::strcmp(env, "1") == 0;
}

std::atomic<bool> g_enabled{enabledByEnvironment()};
thread_local std::string t_last_report;

class Checker {
 public:
  int newLane(std::string label, bool stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    lanes_.push_back({std::move(label), stream, {}});
    return static_cast<int>(lanes_.size()) - 1;
  }

  void setLabel(int lane, std::string label) {
    std::lock_guard<std::mutex> lock(mutex_);
    lanes_[lane].label = std::move(label);
  }

  // Clocks only grow, so events recorded before a reset stay true facts.
  void forgetHistory() {
    std::lock_guard<std::mutex> lock(mutex_);
    memory_.clear();
  }

  bool access(int lane, int after, const std::vector<orAccess>& accesses) {
    std::lock_guard<std::mutex> lock(mutex_);
    Ticks& clock = lanes_[lane].clock;
    merge(clock, host_);
    if (after >= 0) merge(clock, lanes_[after].clock);
    if (clock.size() <= static_cast<size_t>(lane)) clock.resize(lane + 1, 0);
    const uint64_t tick = clock[lane] + 1;
    for (const orAccess& a : accesses)
      if (a.bytes && !check(lane, clock, a)) return false;
    clock[lane] = tick;
    for (const orAccess& a : accesses)
      if (a.bytes) record(a, Tick{lane, tick, a.what});
    return true;
  }

  orSanitizerPoint snapshot(int lane) {
    std::lock_guard<std::mutex> lock(mutex_);
    Ticks& clock = lanes_[lane].clock;
    merge(clock, host_);
    auto point = std::make_shared<orSanitizerClock>();
    point->ticks = clock;
    return point;
  }

  void join(int lane, const Ticks& ticks) {
    std::lock_guard<std::mutex> lock(mutex_);
    merge(lanes_[lane].clock, ticks);
  }

  void hostJoin(const Ticks& ticks) {
    std::lock_guard<std::mutex> lock(mutex_);
    merge(host_, ticks);
  }

  void retire(uintptr_t begin, uintptr_t end, const Ticks& before) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = firstOverlapping(begin); it != memory_.end() && it->first < end; ++it) {
      Segment& s = it->second;
      if (ordered(/*lane=*/-1, before, s.write)) s.write = Tick{};
      auto& reads = s.reads;
      reads.erase(std::remove_if(reads.begin(), reads.end(),
                                 [&](const Tick& r) { return ordered(-1, before, r); }),
                  reads.end());
    }
  }

  void forget(uintptr_t begin, uintptr_t end) {
    std::lock_guard<std::mutex> lock(mutex_);
    splitAt(begin);
    splitAt(end);
    memory_.erase(memory_.lower_bound(begin), memory_.lower_bound(end));
  }

 private:
  static void merge(Ticks& into, const Ticks& from) {
    if (into.size() < from.size()) into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
  }

  static bool ordered(int lane, const Ticks& clock, const Tick& earlier) {
    return earlier.lane < 0 || earlier.lane == lane ||
           (static_cast<size_t>(earlier.lane) < clock.size() &&
            clock[earlier.lane] >= earlier.tick);
  }

  // The first segment that ends after `begin`.
  std::map<uintptr_t, Segment>::iterator firstOverlapping(uintptr_t begin) {
    auto it = memory_.upper_bound(begin);
    if (it != memory_.begin()) {
      auto prev = std::prev(it);
      if (prev->second.end > begin) return prev;
    }
    return it;
  }

  bool check(int lane, const Ticks& clock, const orAccess& a) {
    const auto begin = reinterpret_cast<uintptr_t>(a.begin);
    const uintptr_t end = begin + a.bytes;
    for (auto it = firstOverlapping(begin); it != memory_.end() && it->first < end; ++it) {
      const Segment& s = it->second;
      const uintptr_t from = std::max(begin, it->first), to = std::min(end, s.end);
      if (!ordered(lane, clock, s.write)) {
        report(lane, a.what, a.write ? "writes" : "reads", from, to, s.write, "wrote");
        return false;
      }
      if (!a.write) continue;
      for (const Tick& r : s.reads) {
        if (!ordered(lane, clock, r)) {
          report(lane, a.what, "writes", from, to, r, "read");
          return false;
        }
      }
    }
    return true;
  }

  // Splits the segment containing `at` (strictly inside) in two.
  void splitAt(uintptr_t at) {
    auto it = firstOverlapping(at);
    if (it == memory_.end() || it->first >= at) return;
    Segment tail = it->second;
    it->second.end = at;
    memory_.emplace(at, std::move(tail));
  }

  void record(const orAccess& a, const Tick& now) {
    const auto begin = reinterpret_cast<uintptr_t>(a.begin);
    const uintptr_t end = begin + a.bytes;
    splitAt(begin);
    splitAt(end);
    if (a.write) {
      // One segment for the whole range: everything before is overwritten.
      memory_.erase(memory_.lower_bound(begin), memory_.lower_bound(end));
      memory_.emplace(begin, Segment{end, now, {}});
      return;
    }
    uintptr_t cursor = begin;
    auto it = memory_.lower_bound(begin);
    while (cursor < end) {
      if (it == memory_.end() || it->first > cursor) {  // a gap: never touched
        const uintptr_t gap_end = it == memory_.end() ? end : std::min(end, it->first);
        it = memory_.emplace_hint(it, cursor, Segment{gap_end, Tick{}, {now}});
      } else {
        auto& reads = it->second.reads;
        auto same = std::find_if(reads.begin(), reads.end(),
                                 [&](const Tick& r) { return r.lane == now.lane; });
        if (same != reads.end())
          *same = now;
        else
          reads.push_back(now);
      }
      cursor = it->second.end;
      ++it;
    }
  }

  std::string describe(int lane, const char* what) const {
    const Lane& l = lanes_[lane];
    std::string of = what ? std::string(" (") + what + ")" : "";
    return l.stream ? "a kernel" + of + " on " + l.label : "an operation" + of + " of " + l.label;
  }

  void report(int lane, const char* what, const char* does, uintptr_t from, uintptr_t to,
              const Tick& other, const char* did) {
    std::ostringstream out;
    const int device = orPointerDevice(reinterpret_cast<const void*>(from));
    out << "openreg sanitizer: data race: " << describe(lane, what) << " " << does << " " << (to - from)
        << " bytes of openreg:" << device << " memory at 0x" << std::hex << from << std::dec
        << " that " << describe(other.lane, other.what) << " " << did
        << ", and nothing orders the two: neither a wait on the other's work "
           "(Stream.wait_stream, Stream.wait_event, Work.wait) nor a host synchronisation "
           "between them. If that memory belonged to a tensor freed while the other still "
           "used it, Tensor.record_stream tells the allocator to wait.";
    t_last_report = out.str();
  }

  std::mutex mutex_;
  std::vector<Lane> lanes_;                // GUARDED_BY mutex_
  Ticks host_;                             // GUARDED_BY mutex_
  std::map<uintptr_t, Segment> memory_;    // GUARDED_BY mutex_; key: segment begin
};

// Leaked: detached stream workers may launch while the process exits.
Checker& checker() {
  static Checker* instance = new Checker();
  return *instance;
}

bool sanitizerOn() { return g_enabled.load(std::memory_order_relaxed); }

}  // namespace

namespace detail {

int sanitizerNewStreamLane(const std::string& label) { return checker().newLane(label, true); }

orSanitizerPoint sanitizerSnapshot(orStream stream) {
  return sanitizerOn() ? checker().snapshot(streamLane(stream)) : nullptr;
}

void sanitizerForget(const void* begin, size_t bytes) {
  if (!sanitizerOn()) return;
  const auto b = reinterpret_cast<uintptr_t>(begin);
  checker().forget(b, b + bytes);
}

}  // namespace detail

void orSanitizerEnable(bool on) {
  if (g_enabled.exchange(on) != on) checker().forgetHistory();
}

bool orSanitizerEnabled() { return sanitizerOn(); }

std::string orSanitizerLastReport() { return t_last_report; }

void orSanitizerSetLabel(orStream stream, const std::string& label) {
  if (stream) checker().setLabel(detail::streamLane(stream), label);
}

orError orSanitizerStreamAccess(orStream stream, const std::vector<orAccess>& accesses) {
  if (!stream) return orErrorInvalidValue;
  if (!sanitizerOn()) return orSuccess;
  return checker().access(detail::streamLane(stream), /*after=*/-1, accesses) ? orSuccess
                                                                             : orErrorDataRace;
}

void orSanitizerRetire(const void* begin, size_t bytes, orEvent event) {
  if (!sanitizerOn()) return;
  if (auto point = detail::eventPoint(event)) {
    const auto b = reinterpret_cast<uintptr_t>(begin);
    checker().retire(b, b + bytes, point->ticks);
  }
}

int orSanitizerLaneCreate(const std::string& label) { return checker().newLane(label, false); }

orError orSanitizerLaneAccess(int lane, orStream after, const std::vector<orAccess>& accesses,
                              orSanitizerPoint* point) {
  if (!point) return orErrorInvalidValue;
  *point = nullptr;
  if (!sanitizerOn()) return orSuccess;
  const int after_lane = after ? detail::streamLane(after) : -1;
  if (!checker().access(lane, after_lane, accesses)) return orErrorDataRace;
  *point = checker().snapshot(lane);
  return orSuccess;
}

void orSanitizerStreamJoin(orStream stream, const orSanitizerPoint& point) {
  if (stream && point && sanitizerOn()) checker().join(detail::streamLane(stream), point->ticks);
}

void orSanitizerHostJoin(const orSanitizerPoint& point) {
  if (point && sanitizerOn()) checker().hostJoin(point->ticks);
}

}  // namespace openreg
