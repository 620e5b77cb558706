// BatchSegments: the segments one batch call copies to or from, each looked up once.
//
// ClientBackend::FindSegment takes the backend's lock and, for a segment mapped from another
// process, asks whether its owner still lives (a poll of the owner's socket: a system call,
// ~1.5 µs on the reference VM). A batch of 32 keys on one store asked it once per key before the
// copies and once per key after them; for the batch the answer is the same either way. What
// keeps a dead owner's bytes out is the question asked after a copy, and death is final: asked
// once per segment after every copy of the batch, it covers each copy as well as asking after
// each one did. (docs/architecture.md, "Distributed mode": liveness on one host.)
//
// Thread-safety: Find and AliveAfterCopies are not thread-safe (call them from one thread,
// before and after a parallel copy); Found is const and safe from many threads once every
// segment it is asked for was found.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <memory>

#include "client/client_backend.h"

namespace tierkv {

class BatchSegments {
 public:
  explicit BatchSegments(ClientBackend& backend) : backend_(&backend) {}

  // The segment `id` as FindSegment answered the first time it was asked for in this batch
  // (null: not reachable from here, or its owner gone).
  const std::shared_ptr<SegmentAccess>& Find(SegmentId id) {
    auto [it, added] = found_.try_emplace(id);
    if (added) it->second.access = backend_->FindSegment(id);
    return it->second.access;
  }

  // What Find answered for `id`; null for a segment Find was not asked for.
  const std::shared_ptr<SegmentAccess>& Found(SegmentId id) const {
    static const std::shared_ptr<SegmentAccess> kNone;
    auto it = found_.find(id);
    return it == found_.end() ? kNone : it->second.access;
  }

  // Whether the owner of segment `id` (found) is alive now: asked once per segment, the first
  // time, which must be after every copy of the batch to or from it.
  bool AliveAfterCopies(SegmentId id) {
    auto it = found_.find(id);
    if (it == found_.end() || it->second.access == nullptr) return false;
    Entry& e = it->second;
    if (!e.asked) {
      e.alive = e.access->alive();
      e.asked = true;
    }
    return e.alive;
  }

 private:
  struct Entry {
    std::shared_ptr<SegmentAccess> access;
    bool asked = false;  // AliveAfterCopies asked the owner
    bool alive = false;
  };
  ClientBackend* backend_;
  absl::flat_hash_map<SegmentId, Entry> found_;
};

}  // namespace tierkv
