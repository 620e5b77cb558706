// The master's registry of mounted segments and their allocators.
//
// Thread-safety: all methods are thread-safe. mu_ (shared for lookups and
// placement, exclusive for mount/unmount) comes after object-table shard locks
// and before allocator locks in the master's lock order (docs/architecture.md).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "master/segment_feed.h"
#include "memory/offset_allocator.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {

using SegmentId = uint32_t;

// What the owner of a segment says about it when it mounts it.
struct MountOptions {
  // The owner keeps an index of the segment (store/segment_index.h) fed by a stream: the
  // segment gets a SegmentFeed (its frees are fenced), and is held — not used for placement —
  // until its first stream is linked (SegmentRegistry::Release).
  bool index_stream = false;
  // The owner has an SSD tier behind the segment: while its tier stream is down, eviction there
  // waits for it (demotes later) instead of dropping objects.
  bool has_tier = false;
  // The tenant the segment is dedicated to ("" = shared): a tenant that has dedicated segments
  // is placed on them only, and no other tenant's (nor the default tenant's) objects go there.
  std::string tenant;
};

struct Segment {
  // `index_linger`: its feed's (SegmentFeed's constructor).
  Segment(SegmentId id, std::string name, uint64_t capacity, MountOptions options,
          std::chrono::microseconds index_linger = std::chrono::microseconds(0));
  const SegmentId id;
  const std::string name;
  const uint64_t capacity;
  const std::shared_ptr<OffsetAllocator> allocator;
  const MountOptions options;
  // The owner's index feed (options.index_stream), else null. Fences the allocator's frees.
  const std::shared_ptr<SegmentFeed> feed;
  // Placement skips a held segment (options.index_stream, until its index is linked).
  mutable std::atomic<bool> held;
  // Placement avoids the segment until then (a writer could not reach it; steady clock, ns since
  // its epoch; 0 = never marked).
  mutable std::atomic<int64_t> unreachable_until_ns{0};
};

// One placed replica: where it lives and the allocation that owns its space.
struct PlacedReplica {
  SegmentId segment;
  Allocation allocation;
};

// The tenant a key belongs to: the name between its two kKeyNamespaceMark bytes
// (tierkv/types.h), "" for a key outside every namespace (the default tenant).
std::string_view TenantOfKey(std::string_view key);

// True when `preferred` (non-empty) names segment `name`: equal to it, or to its part before
// the "@endpoint" a served segment's name carries; a `preferred` ending in ':' ("host:") names
// every segment whose name starts with it (all segments of that host).
bool IsPreferred(const std::string& name, const std::string& preferred);

struct SegmentUsage {
  SegmentId id;
  std::string name;
  uint64_t capacity;
  uint64_t used;
  uint64_t quarantined = 0;  // freed, waiting for the owner's acknowledgment
};

class SegmentRegistry {
 public:
  // Ids are handed out from `first_id` on (a master process starts from a random one, so the
  // ids of two master incarnations practically never collide in a requester's caches).
  // `index_linger`: how long each indexed segment's feed gathers events before it sends them
  // (SegmentFeed).
  explicit SegmentRegistry(SegmentId first_id = 1,
                           std::chrono::microseconds index_linger = std::chrono::microseconds(0))
      : index_linger_(index_linger), next_id_(first_id == 0 ? 1 : first_id) {}
  // SEGMENT_ALREADY_EXISTS for a name already mounted; INVALID_PARAMS for an
  // empty name or zero capacity.
  Result<SegmentId> Mount(const std::string& name, uint64_t capacity, MountOptions options = {});
  // Removes the segment from placement; allocations still held stay valid
  // until dropped. SEGMENT_NOT_FOUND if unknown.
  Status Unmount(SegmentId id);

  std::shared_ptr<const Segment> Find(SegmentId id) const;
  std::shared_ptr<const Segment> FindByName(const std::string& name) const;

  // Lets placement use a held segment (its index is linked). False if it is not mounted.
  bool Release(SegmentId id);

  // Places `replica_num` replicas of `size` bytes on distinct segments: the
  // preferred one first (when mounted), then the freest (free = neither used nor quarantined).
  // Held segments and those in `excluded` (a requester that cannot reach them) are skipped.
  // NO_AVAILABLE_HANDLE when fewer than `replica_num` segments have room (nothing is kept then).
  // Segments marked unreachable (MarkUnreachable) until after `now` come last, used only when
  // the others cannot take the replicas. `tenant` (of the key, TenantOfKey): its dedicated
  // segments if it has any mounted, else the shared ones.
  Result<std::vector<PlacedReplica>> Allocate(uint64_t size, size_t replica_num,
                                              const std::string& preferred_segment,
                                              const std::vector<SegmentId>& excluded = {},
                                              SteadyTime now = {},
                                              std::string_view tenant = {}) const;
  // The tenant whose segments `tenant`'s objects go to: `tenant` when it has a dedicated
  // segment mounted, else "" (the shared ones).
  std::string PlacementPool(std::string_view tenant) const;
  // Placement avoids segment `id` until `until`. False if it is not mounted.
  bool MarkUnreachable(SegmentId id, SteadyTime until);

  std::vector<SegmentUsage> Usage() const;
  // Waits up to `timeout` until the ranges quarantined now on segments whose feed has a stream
  // are released (their owners acknowledged the frees); true if something was waited for and
  // released.
  bool WaitForQuarantine(std::chrono::milliseconds timeout) const;
  uint64_t LargestCapacity() const;
  size_t Count() const;

 private:
  std::string PlacementPoolLocked(std::string_view tenant) const;  // requires mu_
  const std::chrono::microseconds index_linger_;
  mutable std::shared_mutex mu_;
  SegmentId next_id_ = 1;                                         // guarded by mu_
  std::map<SegmentId, std::shared_ptr<const Segment>> segments_;  // guarded by mu_
};

}  // namespace tierkv
