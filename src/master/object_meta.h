// The metadata of one object in the master's table: state, pins, times, replicas, and the
// version an upsert is writing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "master/replica.h"
#include "master/segment_index_types.h"
#include "master/segment_registry.h"
#include "tierkv/types.h"

namespace tierkv {

enum class ObjectState : uint8_t { kPending, kComplete };

// The next version of an object an upsert is writing (MasterService::UpsertStart): invisible to
// readers until its PutEnd swaps it in.
struct PendingVersion {
  uint64_t size = 0;
  uint64_t put_id = 0;
  bool soft_pin = false;
  SteadyTime soft_pin_until{};  // SteadyTime{}: the pin does not lapse
  bool hard_pin = false;
  ReplicaList replicas;  // memory replicas only
  SteadyTime put_started{};
};

// Field order matters: an entry holds the key and this struct. A lease (exists) reads and
// writes only the fields up to `extras_` (the group), right after the key, so it touches the
// entry's first 40 bytes (one or two cache lines; the reuse policy reads the next 8 too); a get
// reads on up to `replicas` (ObjectMap::EntryReads). The state, the flags and the two counters
// share the first 8 bytes (bit-fields: every access is under the shard's lock).
struct ObjectMeta {
  static constexpr unsigned kDiskHitsBits = 21;  // counts past promote_min_hits' 2^20
  static constexpr unsigned kReuseReferencesBits = 27;
  static constexpr uint32_t kMaxDiskHits = (uint32_t{1} << kDiskHitsBits) - 1;
  static constexpr uint32_t kMaxReuseReferences = (uint32_t{1} << kReuseReferencesBits) - 1;

  ObjectState state = ObjectState::kPending;
  bool soft_pin : 1 = false;
  bool hard_pin : 1 = false;
  bool demoting : 1 = false;  // a tier move is writing it to disk: not evicted again meanwhile
  // A pending put an upsert started for a key it did not find: its PutEnd is confirmed by every
  // store's index (MasterService::EndPut).
  bool confirm_all : 1 = false;
  // Kept for eviction policies that learn reuse (ReuseTracker, src/master/reuse_policy.h): how
  // often the object was referenced (saturating at kMaxReuseReferences), whether it is a tail
  // chunk, and until when further references count as the last one (reuse_until below).
  bool reuse_tail : 1 = false;
  // Rebuilt from a store's index by restart recovery: not removed, even by a forced Remove,
  // within a lease TTL of put_started (readers may still hold leases the previous master
  // granted; MasterService::HeldUntil). A flag, not a deadline.
  bool recovered : 1 = false;
  // A reader's lease on the object itself (ungrouped objects; groups lease in GroupMeta) runs
  // until last_access + the master's lease TTL while this is set: every lease is granted at
  // an access, for one TTL (MasterService::OwnLeaseDeadline), so the deadline needs no field.
  bool leased : 1 = false;
  // Reads served from disk since it was last in memory (saturating at kMaxDiskHits).
  uint64_t disk_hits : kDiskHitsBits = 0;
  uint64_t reuse_references : kReuseReferencesBits = 0;
  SteadyTime last_access{};  // also when the lease (above) was granted

 private:
  // The group (most objects have none) and the rare state, out of line: one pointer in the
  // entry, null for almost every object. Read and set through group_id() and the accessors
  // below.
  struct ObjectExtras {
    std::string group_id;
    SteadyTime soft_pin_until{};
    uint64_t promotion_id = 0;
    std::unique_ptr<PendingVersion> next;
  };
  std::unique_ptr<ObjectExtras> extras_;

 public:
  SteadyTime reuse_until{};
  uint64_t size = 0;
  uint64_t checksum = 0;
  ReplicaList replicas;
  // Colder: puts, tier moves, recovery.
  uint64_t put_id = 0;  // PutEnd/PutRevoke must name the put that created it
  // When its put started (or, for a recovered object, when a store last reported it).
  SteadyTime put_started{};

  // Until when its own lease runs, under a master whose lease TTL is `lease_ttl` (`leased`);
  // SteadyTime{} if it has none.
  SteadyTime own_lease_deadline(SteadyTime::duration lease_ttl) const {
    return leased ? last_access + lease_ttl : SteadyTime{};
  }

  // The group it belongs to ("" = none).
  const std::string& group_id() const { return extras_ ? extras_->group_id : kNoGroup; }
  void set_group_id(std::string_view group) {
    if (group.empty() && !extras_) return;
    Extras().group_id = group;
    Trim();
  }
  // Where the fields a lease reads end (ObjectMap::PrefetchEntry).
  const char* lease_fields_end() const { return reinterpret_cast<const char*>(&extras_ + 1); }

  // The rare state, kept out of line (ObjectExtras): read and set through these.
  // When soft_pin lapses (SteadyTime{}: never; SoftPinned below reads both).
  SteadyTime soft_pin_until() const { return extras_ ? extras_->soft_pin_until : SteadyTime{}; }
  void set_soft_pin_until(SteadyTime t) {
    if (t == SteadyTime{} && !extras_) return;
    Extras().soft_pin_until = t;
    Trim();
  }
  // A promotion (copy back from disk) in flight, 0 = none. Its memory range is held by the
  // master's promotion table, not here, so removing the object meanwhile cannot free a
  // range a requester is still writing.
  uint64_t promotion_id() const { return extras_ ? extras_->promotion_id : 0; }
  void set_promotion_id(uint64_t id) {
    if (id == 0 && !extras_) return;
    Extras().promotion_id = id;
    Trim();
  }
  // An upsert in flight (at most one): the object is not evicted, removed or upserted again
  // meanwhile. Null otherwise.
  PendingVersion* next() const { return extras_ ? extras_->next.get() : nullptr; }
  void set_next(std::unique_ptr<PendingVersion> version) {
    if (!version && !extras_) return;
    Extras().next = std::move(version);
    Trim();
  }
  // Ends the upsert's ownership here: the caller frees it (outside the shard lock).
  std::unique_ptr<PendingVersion> take_next() {
    if (!extras_) return nullptr;
    std::unique_ptr<PendingVersion> version = std::move(extras_->next);
    Trim();
    return version;
  }

 private:
  static inline const std::string kNoGroup;
  ObjectExtras& Extras() {
    if (!extras_) extras_ = std::make_unique<ObjectExtras>();
    return *extras_;
  }
  // Frees the block once every field is back at its default.
  void Trim() {
    if (extras_->group_id.empty() && extras_->soft_pin_until == SteadyTime{} &&
        extras_->promotion_id == 0 && !extras_->next) {
      extras_.reset();
    }
  }
};

// Whether `meta`'s soft pin still holds at `now` (its TTL, if any, not yet run out).
inline bool SoftPinned(const ObjectMeta& meta, SteadyTime now) {
  const SteadyTime until = meta.soft_pin_until();
  return meta.soft_pin && (until == SteadyTime{} || now < until);
}

}  // namespace tierkv
