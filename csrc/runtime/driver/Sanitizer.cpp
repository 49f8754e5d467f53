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
// disjoint byte segments, each with its last writes and the reads since; an
// access races with an entry of another lane that its clock does not cover.
// An entry may be periodic (a strided view with too many runs to list, see
// orAccess): it then covers only its window of each period of the segment,
// so x[:, 0] and x[:, 1] of a tall matrix share no byte, and a segment keeps
// one write per window until a write covering them replaces them.
//
// Everything runs on the launching thread, under one mutex, only while the
// checker is on; off, a launch costs one relaxed load.
#include "Internal.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <numeric>
#include <mutex>
#include <sstream>

namespace openreg {

struct orSanitizerClock {
  std::vector<uint64_t> ticks;  // index: lane
};

namespace {

using Ticks = std::vector<uint64_t>;

// Which bytes of a segment an access touches: all (period 0), or those whose
// address modulo `period` lies in [phase, phase + width), wrapping.
struct Pattern {
  uint64_t period = 0;
  uint64_t phase = 0;
  uint64_t width = 0;
  bool every_period = false;

  static Pattern of(const orAccess& a) {
    return a.period ? Pattern{a.period, a.phase % a.period, a.width, a.every_period} : Pattern{};
  }
  bool operator==(const Pattern& o) const {
    return period == o.period && phase == o.phase && width == o.width &&
           every_period == o.every_period;
  }
};

// Whether [a, a + wa) and [b, b + wb) meet on a circle of length g (a, b < g).
bool meetOnCircle(uint64_t a, uint64_t wa, uint64_t b, uint64_t wb, uint64_t g) {
  if (wa >= g || wb >= g) return true;
  const auto meet = [](uint64_t x, uint64_t wx, uint64_t y, uint64_t wy) {
    return x < y + wy && y < x + wx;
  };
  return meet(a, wa, b, wb) || meet(a, wa, b + g, wb) || meet(a + g, wa, b, wb);
}

// Whether two accesses of one segment may touch a common byte: exact when
// their periods are equal, conservative otherwise (both seen at their
// periods' greatest common divisor, where each covers a window at least as
// wide as its own).
bool mayShare(const Pattern& x, const Pattern& y) {
  if (!x.period || !y.period) return true;
  const uint64_t g = std::gcd(x.period, y.period);
  return meetOnCircle(x.phase % g, x.width, y.phase % g, y.width, g);
}

// Whether `p` touches any byte of [from, to) (an entry of a segment covers
// only the segment's bytes in its pattern: a periodic view's entry may cover
// none of a small range inside it, x[5, 1] within x[:, 0]'s span).
bool touches(const Pattern& p, uintptr_t from, uintptr_t to) {
  if (!p.period || to - from >= p.period) return true;
  return meetOnCircle(from % p.period, to - from, p.phase, p.width, p.period);
}

// Whether every byte `inner` touches in a segment inside `outer`'s range,
// `outer` touches too.
bool covers(const Pattern& outer, const Pattern& inner) {
  if (!outer.period) return true;
  if (!outer.every_period || inner.period != outer.period) return false;
  const uint64_t offset = (inner.phase + outer.period - outer.phase) % outer.period;
  return offset + inner.width <= outer.width;
}

struct Tick {
  int lane = -1;  // -1: none
  uint64_t tick = 0;
  const char* what = nullptr;  // the access's operation, for reports
  Pattern pattern;
};

struct Segment {
  uintptr_t end = 0;
  // The last writes: one, unless periodic writes left several windows.
  std::vector<Tick> writes;
  std::vector<Tick> reads;  // since then, the latest per lane and pattern
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
      if (a.bytes) record(a, Tick{lane, tick, a.what, Pattern::of(a)});
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
      for (auto* ticks : {&it->second.writes, &it->second.reads})
        ticks->erase(std::remove_if(ticks->begin(), ticks->end(),
                                    [&](const Tick& t) { return ordered(-1, before, t); }),
                     ticks->end());
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
    const Pattern pattern = Pattern::of(a);
    for (auto it = firstOverlapping(begin); it != memory_.end() && it->first < end; ++it) {
      const Segment& s = it->second;
      const uintptr_t from = std::max(begin, it->first), to = std::min(end, s.end);
      const auto races = [&](const Tick& t) {
        return mayShare(pattern, t.pattern) && touches(pattern, from, to) &&
               touches(t.pattern, from, to) && !ordered(lane, clock, t);
      };
      for (const Tick& w : s.writes) {
        if (races(w)) {
          report(lane, a.what, a.write ? "writes" : "reads", from, to, w, "wrote");
          return false;
        }
      }
      if (!a.write) continue;
      for (const Tick& r : s.reads) {
        if (races(r)) {
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
    if (a.write && !now.pattern.period) {
      // One segment for the whole range: everything before is overwritten.
      memory_.erase(memory_.lower_bound(begin), memory_.lower_bound(end));
      memory_.emplace(begin, Segment{end, {now}, {}});
      return;
    }
    uintptr_t cursor = begin;
    auto it = memory_.lower_bound(begin);
    while (cursor < end) {
      if (it == memory_.end() || it->first > cursor) {  // a gap: never touched
        const uintptr_t gap_end = it == memory_.end() ? end : std::min(end, it->first);
        it = memory_.emplace_hint(it, cursor, Segment{gap_end, {}, {}});
      }
      Segment& s = it->second;
      if (a.write) {
        // A periodic write overwrites only what its windows cover.
        for (auto* ticks : {&s.writes, &s.reads})
          ticks->erase(std::remove_if(ticks->begin(), ticks->end(),
                                      [&](const Tick& t) {
                                        // It was ordered after them (checked), or is their lane's.
                                        return covers(now.pattern, t.pattern) ||
                                               (t.lane == now.lane && t.pattern == now.pattern);
                                      }),
                       ticks->end());
        s.writes.push_back(now);
      } else {
        // A lane's later read stands for its earlier ones of the same bytes.
        auto same = std::find_if(s.reads.begin(), s.reads.end(), [&](const Tick& r) {
          return r.lane == now.lane && r.pattern == now.pattern;
        });
        if (same != s.reads.end())
          *same = now;
        else
          s.reads.push_back(now);
      }
      cursor = s.end;
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
