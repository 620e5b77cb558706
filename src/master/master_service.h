// MasterService: the metadata logic of the pool (objects, replicas, segments,
// leases, eviction). Never touches object bytes.
//
// A library class: embedded mode calls it directly; a later issue puts it
// behind RPC. Every call is batched and returns one result per key; a bad key
// never fails its neighbours. Thread-safety: all methods are thread-safe; the
// lock order is in object_table.h and docs/architecture.md.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/eviction_policy.h"
#include "master/object_table.h"
#include "master/segment_registry.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {

struct MasterOptions {
  Millis lease_ttl{10000};
  double high_watermark = 0.90;
  double eviction_ratio = 0.05;
  Millis put_timeout{30000};  // pending puts older than this are reclaimed
  uint32_t shards = 64;
  const Clock* clock = SystemClock::Instance();
  std::shared_ptr<const EvictionPolicy> policy;  // null = LRU
};

struct ReplicaLocation {
  SegmentId segment = 0;
  ReplicaTier tier = ReplicaTier::kMemory;
  uint64_t offset = 0;
  uint64_t size = 0;  // object size (the allocation may be larger)
};

struct PutStartResult {
  uint64_t put_id = 0;
  std::vector<ReplicaLocation> replicas;
};

struct ObjectReplicas {
  uint64_t size = 0;
  uint64_t checksum = 0;
  std::vector<ReplicaLocation> replicas;
  SteadyTime lease_deadline{};  // reads finishing later fail with LEASE_EXPIRED
};

struct MasterStats {
  uint64_t objects = 0;
  uint64_t pending_objects = 0;
  uint64_t groups = 0;
  uint64_t evicted_objects = 0;
  uint64_t evicted_bytes = 0;
  uint64_t reclaimed_puts = 0;
  uint64_t lease_grants = 0;
};

class MasterService {
 public:
  explicit MasterService(MasterOptions options);
  ~MasterService();

  // --- Segments ---
  Result<SegmentId> MountSegment(const std::string& name, uint64_t capacity);
  // Unmounts and drops every replica on it; an object left without replicas is
  // removed, and so is the rest of its group (no partial groups).
  Status UnmountSegment(SegmentId id);
  const SegmentRegistry& segments() const { return segments_; }

  // --- Two-phase put ---
  // Per key: where to write, or INVALID_KEY, INVALID_PARAMS (size 0, bad
  // config), DUPLICATE_KEY, OBJECT_ALREADY_EXISTS, OBJECT_TOO_LARGE,
  // NO_AVAILABLE_HANDLE (after eviction was tried).
  std::vector<Result<PutStartResult>> PutStart(const std::vector<std::string>& keys,
                                               const std::vector<uint64_t>& sizes,
                                               const ReplicateConfig& config);
  // Makes objects readable with their checksum. OBJECT_NOT_FOUND (never
  // started, revoked or reclaimed), INVALID_WRITE (not pending, or another put).
  std::vector<Status> PutEnd(const std::vector<std::string>& keys,
                             const std::vector<uint64_t>& put_ids,
                             const std::vector<uint64_t>& checksums);
  // Frees pending objects. Same errors as PutEnd.
  std::vector<Status> PutRevoke(const std::vector<std::string>& keys,
                                const std::vector<uint64_t>& put_ids);

  // --- Reads; both grant a read lease (the whole group's for grouped keys) ---
  // Per key: 1 readable, 0 not (absent or pending), or INVALID_KEY.
  std::vector<int> Exists(const std::vector<std::string>& keys);
  // Per key: replicas, or INVALID_KEY, OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY.
  std::vector<Result<ObjectReplicas>> GetReplicas(const std::vector<std::string>& keys);

  // --- Removal ---
  // OBJECT_HAS_LEASE while leased unless force; REPLICA_IS_NOT_READY for a
  // pending put (revoke it instead); OBJECT_NOT_FOUND.
  Status Remove(const std::string& key, bool force);
  // Removes complete objects (leased ones only with force); returns the count.
  uint64_t RemoveAll(bool force);

  // --- Maintenance (a background thread calls these; tests call them too) ---
  // Frees puts pending longer than put_timeout; returns how many.
  uint64_t ReclaimAbandonedPuts();
  // Evicts on every segment above the high watermark; returns bytes freed.
  uint64_t EvictIfNeeded();
  // Frees at least `target_bytes` on `segment` if evictable objects allow;
  // returns bytes freed.
  uint64_t EvictFromSegment(SegmentId segment, uint64_t target_bytes);

  MasterStats Stats();
  const MasterOptions& options() const { return options_; }

 private:
  enum class EndKind { kEnd, kRevoke };
  Status EndPut(const std::string& key, uint64_t put_id, uint64_t checksum, EndKind kind);
  Result<PutStartResult> PutStartOne(const std::string& key, uint64_t size,
                                     const std::string& group, const ReplicateConfig& config,
                                     SteadyTime now);
  void GrantLease(Shard& shard, ObjectMeta& meta, SteadyTime now);
  bool IsLeased(Shard& shard, const ObjectMeta& meta, SteadyTime now) const;
  std::vector<EvictionCandidate> CollectCandidates(SegmentId segment, SteadyTime now);
  // Evicts one candidate if still evictable; returns bytes freed on `segment`.
  uint64_t EvictCandidate(const EvictionCandidate& c, SegmentId segment, SteadyTime now);
  // Evicts on the segments a put of `size` would use; returns bytes freed.
  uint64_t EvictForPut(uint64_t size, const ReplicateConfig& config);

  const MasterOptions options_;
  std::shared_ptr<const EvictionPolicy> policy_;
  SegmentRegistry segments_;
  ObjectTable table_;
  std::atomic<uint64_t> next_put_id_{1};
  std::atomic<uint64_t> evicted_objects_{0};
  std::atomic<uint64_t> evicted_bytes_{0};
  std::atomic<uint64_t> reclaimed_puts_{0};
  std::atomic<uint64_t> lease_grants_{0};
};

}  // namespace tierkv
