// The wire format of oreg_ccl's ZeroMQ transport.
//
// Every message is two ZeroMQ frames: a fixed 160-byte wire::Header, then the
// payload (one chunk of a logical message; large messages travel as several
// chunks so the receiver reduces one while the next is on the wire).
// A receiver accepts a message only if all of this holds:
//   magic and version match; `group` is its own group's identity (a random
//   64-bit id that rank 0 draws and publishes through the c10d store, fresh
//   for every group, split and torchrun restart: a message from another job
//   or from before a restart carries another id); `src` is a rank of the
//   group on another host; `kind` is known; the chunk lies inside the
//   message (offset + chunk <= bytes) and follows the previous chunk of that
//   sender; the payload frame has exactly `chunk` bytes; `what` is
//   NUL-terminated. A message from the group's own members that is
//   inconsistent fails the group (DistBackendError naming the sender); one
//   that does not belong to the group is dropped with a warning naming the
//   reason, so a stray or hostile connection cannot break a healthy job.
// `tag` is the collective sequence number (or the user's p2p tag), and
// `what` (e.g. "allreduce#7 1024 x Float SUM") names the operation, element
// count and dtype: the receiver compares both, with `bytes`, against what it
// posted. A longer description travels cut short with a digest of the whole
// (wireWhat in Transport.h), so a difference past the cut is still seen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace openreg::ccl::wire {

constexpr uint32_t kMagic = 0x4C43434Fu;  // "OCCL" little-endian
constexpr uint16_t kVersion = 1;

enum class Kind : uint8_t {
  kCollective = 0,  // Channel::kCollective data
  kP2P = 1,         // Channel::kP2P data
  kAbort = 2,       // the sender's group failed; payload: the reason
  kAbortAck = 3,    // the sender took our abort: its group has failed too; no payload
};

struct Header {
  uint32_t magic;
  uint16_t version;
  uint8_t kind;
  uint8_t reserved;
  uint32_t src;     // sender's rank in the group
  uint32_t pad;
  uint64_t group;   // the group's identity
  uint64_t tag;     // collective sequence number / p2p tag
  uint64_t bytes;   // size of the whole logical message
  uint64_t offset;  // of this chunk within it
  uint64_t chunk;   // bytes in this frame's payload
  char what[104];
};
static_assert(sizeof(Header) == 160, "the header layout is part of the protocol");

}  // namespace openreg::ccl::wire
