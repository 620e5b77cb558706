// MasterService: the metadata logic of the pool (objects, replicas, segments,
// leases, eviction). Never touches object bytes.
//
// The MasterApi of this process: embedded mode calls it directly, and `tierkv master`
// (rpc/master_server.h) serves it over gRPC. Every call is batched and returns one result per
// key; a bad key never fails its neighbours. Write-behind (segments whose tier asks for it) is
// the service's own: each PutEnd queues its keys and a background thread copies them to disk.
// Thread-safety: all methods are thread-safe; the lock order is in object_table.h and
// docs/architecture.md.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/eviction_policy.h"
#include "master/master_api.h"
#include "master/master_types.h"
#include "master/object_table.h"
#include "master/reuse_policy.h"
#include "master/segment_index_types.h"
#include "master/segment_registry.h"
#include "master/tier_mover.h"
#include "master/write_behind.h"
#include "tierkv/config.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {

struct MasterOptions {
  Millis lease_ttl{10000};
  // A soft pin's lifetime when the put names none (ReplicateConfig::soft_pin_ttl_ms); 0 = until
  // the object is removed.
  Millis soft_pin_ttl{0};
  double high_watermark = 0.90;
  double eviction_ratio = 0.05;
  Millis put_timeout{30000};  // pending puts older than this are reclaimed
  uint32_t shards = 64;
  const Clock* clock = SystemClock::Instance();
  std::shared_ptr<const EvictionPolicy> policy;  // null = LRU
  SegmentId first_segment_id = 1;                // ids are handed out from here on (0 counts as 1)
  // Put ids are handed out from here on (0 counts as 1). A master process starts from its
  // start time in microseconds, so a later master's ids exceed an earlier one's (restart
  // recovery keeps the newer of two reported puts of a key; a PutEnd naming an older id is a
  // lost put).
  uint64_t first_put_id = 1;
  // How long a PutStart batch may wait, in total, for owners to acknowledge the frees of its
  // eviction (fenced segments quarantine freed ranges until then) before NO_AVAILABLE_HANDLE.
  Millis free_ack_wait{1000};
  // How long each store's index feed gathers events before it sends them (SegmentFeed): one
  // message per linger instead of one per PutEnd under load. 0 = at once (in-process masters,
  // whose tests pump the feeds by hand); `tierkv master` uses --index-linger-us.
  std::chrono::microseconds index_linger{0};
  // How long placement avoids a segment a client reported it could not write to (PutRevoke's
  // `unreachable`); its owner's heartbeats do not clear it.
  Millis unreachable_hold{10000};
  // Removes and upserts wait (up to free_ack_wait) until the stores holding the object applied
  // them to their indexes, and fail with TRANSFER_FAIL when one did not: then a master taking
  // over cannot recover a removed object, or the version an acknowledged upsert replaced, from
  // a store that had not heard of it yet. `tierkv master` turns it on; off here because an
  // in-process master's segments have no index stream (and tests pump streams by hand).
  bool confirm_index_updates = false;
};

// The master options a client config asks for (default_kv_lease_ttl_ms,
// eviction_high_watermark_ratio, eviction_ratio, put_start_discard_timeout_ms, metadata_shards);
// ValidateConfig has checked their ranges.
MasterOptions MasterOptionsFrom(const Config& config);

// How often maintenance (MasterService::RunMaintenance) runs for `options`: a quarter of the
// shorter of the lease TTL and the put timeout, between 10 ms and 1 s.
Millis MaintenancePeriod(const MasterOptions& options);

class MasterService final : public MasterApi {
 public:
  explicit MasterService(MasterOptions options);
  ~MasterService();

  // --- Segments ---
  Result<SegmentId> MountSegment(const std::string& name, uint64_t capacity) override;
  // With what the owner says about the segment (MountOptions): an index_stream segment is held
  // out of placement until OpenIndexLink's link finishes.
  Result<SegmentId> MountSegment(const std::string& name, uint64_t capacity, MountOptions options);
  // Unmounts and drops every replica on it; an object left without replicas is
  // removed, and so is the rest of its group (no partial groups).
  Status UnmountSegment(SegmentId id) override;
  const SegmentRegistry& segments() const { return segments_; }
  // The owner of `segment` has an SSD tier: eviction there demotes objects through
  // `mover` instead of dropping them; with `write_behind`, every put that ends with a memory
  // replica there is also copied to the tier soon after its PutEnd (offload_write_policy
  // write_behind). Null detaches it.
  void SetTierMover(SegmentId segment, std::shared_ptr<TierMover> mover, bool write_behind = false);
  // Detaches `mover` from `segment` if it is still the one there (a newer one stays).
  void DetachTierMover(SegmentId segment, const TierMover* mover);
  // Blocks until every write-behind copy queued so far was handed to its tier (tests).
  void DrainWriteBehind();
  // Keys the write-behind queue dropped (full) and copies that failed, since the start.
  uint64_t write_behind_dropped() const;
  uint64_t write_behind_failed() const;

  // --- SSD tier bookkeeping (called by the segment's owner) ---
  // The owner's tier reused `region`: drops the disk replicas of `keys` on `segment` that
  // point into it at `generation`. An object left without replicas is removed, with the rest
  // of its group. Returns the objects removed.
  uint64_t DropDiskReplicas(SegmentId segment, uint32_t region, uint64_t generation,
                            const std::vector<std::string>& keys) override;
  // Warm restart: registers records as complete, ungrouped objects with one disk replica
  // on `segment`. Per record: OK, OBJECT_ALREADY_EXISTS (the key is already stored),
  // INVALID_KEY, SEGMENT_NOT_FOUND.
  std::vector<Status> AddDiskReplicas(SegmentId segment,
                                      const std::vector<DiskRecord>& records) override;
  // Write-behind: copies complete objects that have a memory replica on a segment with a
  // tier mover, and no disk replica yet, to that tier, keeping the memory replica. Per key:
  // OK (copied, or already on disk), OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY, or the tier's
  // write error.
  // `only` (optional) restricts the copies to the segments it accepts; an object with no memory
  // replica on such a segment is left alone (OK).
  std::vector<Status> CopyToDisk(const std::vector<std::string>& keys,
                                 const std::function<bool(SegmentId)>& only = nullptr);

  // --- Segment index links and restart recovery (master_recovery.cc) ---
  // One stream of a segment's owner (mounted with index_stream): Add takes the owner's index
  // report in chunks, Finish links it. On the segment's first link the reported objects are
  // adopted (restart recovery: complete objects, held un-evictable and un-removable for one
  // lease TTL; replicas of one put reported by several stores are merged, and of two puts of a
  // key the newer wins); on later links the report is only compared with the table. Finish
  // attaches the segment's feed, queues as its next batch what the owner must forget (reported,
  // not in the table) and learn (in the table, not reported), and releases the segment for
  // placement. Thread-safety: one thread per link; links of different segments run in
  // parallel with everything else.
  class IndexLink {
   public:
    ~IndexLink();
    IndexLink(const IndexLink&) = delete;
    IndexLink& operator=(const IndexLink&) = delete;
    // The report will hold about `entries` entries (its first part says so): on a first link
    // the table and the link's bookkeeping are reserved for them at once (optional).
    void Expect(uint64_t entries);
    // Adopts (first link) and records one chunk of the report.
    void Add(const std::vector<IndexEntry>& memory, const std::vector<IndexEntry>& disk);
    // Reconciles and links; the recovery record of the segment. SEGMENT_NOT_FOUND if it was
    // unmounted meanwhile.
    Result<SegmentRecovery> Finish();
    bool first() const { return generation_ == 1; }
    // The feed generation of this link (SegmentFeed::Attach): the stream sends and
    // acknowledges under it.
    uint64_t generation() const { return generation_; }
    const std::shared_ptr<SegmentFeed>& feed() const { return segment_->feed; }

   private:
    friend class MasterService;
    struct Reported;
    IndexLink(MasterService& master, std::shared_ptr<const Segment> segment, uint64_t generation,
              bool discard);
    // Whether no memory entry at e.offset came on this link before (records it).
    bool FirstSeen(const IndexEntry& e);
    MasterService& master_;
    const std::shared_ptr<const Segment> segment_;
    const uint64_t generation_;
    // The first link of a segment this master unmounted before (its store expired and came
    // back): nothing reported is adopted, the store forgets it all. This master went on without
    // the store meanwhile (removes, upserts, evictions the store never heard of), so its index
    // may hold versions this master already replaced; discarding is always safe for a cache.
    const bool discard_;
    const SteadyTime started_;
    std::unique_ptr<Reported> reported_;
    SegmentRecovery recovery_;
  };
  // SEGMENT_NOT_FOUND; INVALID_PARAMS for a segment mounted without index_stream.
  Result<std::unique_ptr<IndexLink>> OpenIndexLink(SegmentId segment);
  // Recovery records of the mounted segments that have linked an index, by id.
  std::vector<SegmentRecovery> Recoveries() const;

  // --- Promotion on hit (copy disk-only objects back to DRAM) ---
  // Counts a disk hit for each key; an object with only disk replicas that reached
  // `min_hits` gets a memory range on its disk replica's segment (when one is free without
  // evicting: admission never evicts), returned with a promotion id. Other keys: an error
  // (OBJECT_NOT_FOUND, NO_AVAILABLE_HANDLE when not admitted or no room).
  std::vector<Result<PutStartResult>> PromoteStart(const std::vector<std::string>& keys,
                                                   uint32_t min_hits) override;
  // Makes promoted ranges readable (`ok` true) or frees them. OBJECT_NOT_FOUND if the object
  // or the promotion is gone (removed, or reclaimed after put_timeout).
  std::vector<Status> PromoteEnd(const std::vector<std::string>& keys,
                                 const std::vector<uint64_t>& promotion_ids,
                                 const std::vector<bool>& ok) override;

  // --- Two-phase put ---
  // Per key: where to write, or INVALID_KEY, INVALID_PARAMS (size 0, bad
  // config), DUPLICATE_KEY, OBJECT_ALREADY_EXISTS, OBJECT_TOO_LARGE,
  // NO_AVAILABLE_HANDLE (after eviction was tried).
  std::vector<Result<PutStartResult>> PutStart(const std::vector<std::string>& keys,
                                               const std::vector<uint64_t>& sizes,
                                               const ReplicateConfig& config) override;
  // PutStart for an upsert: a key that exists gets space for a new version (the current one
  // stays readable) instead of OBJECT_ALREADY_EXISTS; REPLICA_IS_NOT_READY while a put or upsert
  // of it is in progress, INVALID_PARAMS if the config names another group than the object's.
  // A missing key is put as by PutStart.
  std::vector<Result<PutStartResult>> UpsertStart(const std::vector<std::string>& keys,
                                                  const std::vector<uint64_t>& sizes,
                                                  const ReplicateConfig& config) override;
  // Makes objects readable with their checksum. For an upsert's put_id, atomically replaces
  // the object's version: readers asking afterwards get the new one; the old replicas stay
  // allocated until the last lease on them ends, then ReclaimAbandonedPuts frees them.
  // OBJECT_NOT_FOUND (never started, revoked or reclaimed), INVALID_WRITE (not pending, or
  // another put).
  std::vector<Status> PutEnd(const std::vector<std::string>& keys,
                             const std::vector<uint64_t>& put_ids,
                             const std::vector<uint64_t>& checksums) override;
  // Frees pending objects. Same errors as PutEnd.
  std::vector<Status> PutRevoke(const std::vector<std::string>& keys,
                                const std::vector<uint64_t>& put_ids,
                                const std::vector<SegmentId>& unreachable = {}) override;

  // --- Reads; both grant a read lease (the whole group's for grouped keys) ---
  // Per key: 1 readable, 0 not (absent or pending), or INVALID_KEY.
  std::vector<int> Exists(const std::vector<std::string>& keys) override;
  // No copy of the keys (the Python binding's batch_is_exist).
  std::vector<int> ExistsViews(std::span<const std::string_view> keys) override;
  // Per key: replicas, or INVALID_KEY, OBJECT_NOT_FOUND, REPLICA_IS_NOT_READY.
  std::vector<Result<ObjectReplicas>> GetReplicas(const std::vector<std::string>& keys) override;

  // --- Removal ---
  // OBJECT_HAS_LEASE while leased unless force; REPLICA_IS_NOT_READY for a
  // pending put or upsert (revoke it instead); OBJECT_NOT_FOUND. Returns once the stores that
  // held it applied the removal to their indexes (up to free_ack_wait), so that a master taking
  // over cannot recover it from them; TRANSFER_FAIL (removed here) when one did not confirm.
  Status Remove(const std::string& key, bool force) override;
  // Remove, key by key, waiting once for the stores of them all.
  std::vector<Status> BatchRemove(const std::vector<std::string>& keys, bool force) override;
  // Removes complete objects (leased ones only with force; none with an upsert in flight);
  // returns the count.
  uint64_t RemoveAll(bool force) override;
  // The same restricted to keys `regex` (RE2 syntax) matches somewhere in (as Mooncake's
  // regex_search: anchor with ^ and $); INVALID_PARAMS for an expression that does not compile.
  Result<uint64_t> RemoveByRegex(const std::string& regex, bool force) override;
  Result<uint64_t> RemoveInNamespace(const std::string& key_namespace, const std::string& regex,
                                     bool force) override;
  // Per key (master_clear.cc): OK when cleared — the object removed (segment_name empty), or its
  // memory replicas on segment `segment_name` dropped (the object removed with its last
  // replica; disk replicas stay). Else INVALID_KEY, OBJECT_NOT_FOUND, OBJECT_HAS_LEASE (a reader
  // holds a lease, or restart recovery holds it), REPLICA_IS_NOT_READY (a put, upsert or tier
  // move in flight), SEGMENT_NOT_FOUND (no memory replica on that segment). Never forced.
  std::vector<Status> ClearReplicas(const std::vector<std::string>& keys,
                                    const std::string& segment_name) override;

  // --- Maintenance (a background thread calls these; tests call them too) ---
  // ReclaimAbandonedPuts, then EvictIfNeeded: what the maintenance thread runs each period.
  void RunMaintenance();
  // Frees puts and upserts pending longer than put_timeout (returns how many), and the
  // versions upserts replaced whose last lease has ended.
  uint64_t ReclaimAbandonedPuts();
  // Evicts on every segment above the high watermark; returns bytes freed.
  uint64_t EvictIfNeeded();
  // Frees at least `target_bytes` on `segment` if evictable objects allow;
  // returns bytes freed.
  uint64_t EvictFromSegment(SegmentId segment, uint64_t target_bytes);
  // A round samples shards above this many objects (CollectCandidates), taking this many times
  // its share of the target in candidates.
  static constexpr size_t kExactEvictionShardObjects = 4096;
  static constexpr uint64_t kEvictionOversample = 8;

  MasterStats Stats() override;
  // The same, and in the same pass the object and replica counts of each tenant that holds
  // objects (TenantOfKey: "" = the default tenant; their other figures 0) into `by_tenant`.
  MasterStats Stats(std::map<std::string, MasterStats>* by_tenant);
  const Clock* clock() const override { return options_.clock; }
  const MasterOptions& options() const { return options_; }
  // The eviction policy in use (options().policy, or LRU when that is null).
  const EvictionPolicy& policy() const { return *policy_; }

 private:
  // RemoveByRegex (key_namespace null) and RemoveInNamespace.
  Result<uint64_t> RemoveMatching(const std::string* key_namespace, const std::string& regex,
                                  bool force);
  // Exists over a vector of strings or a span of views.
  template <typename Keys>
  std::vector<int> ExistsOf(const Keys& keys);
  enum class EndKind { kEnd, kRevoke };
  // `published`: the segments of an upsert's new version (their indexes must confirm it).
  Status EndPut(const std::string& key, uint64_t put_id, uint64_t checksum, EndKind kind,
                std::vector<SegmentId>* published = nullptr);
  // Remove without waiting; `touched` gets the segments the object's replicas were on.
  Status RemoveOne(const std::string& key, bool force, std::vector<SegmentId>* touched);
  // Waits, up to free_ack_wait in all, until the owners of `segments` applied every index
  // event recorded so far (SegmentFeed::Barrier); returns those that did not confirm in time.
  std::vector<SegmentId> AwaitIndexes(std::vector<SegmentId> segments);
  // With confirm_index_updates: AwaitIndexes over the segments each key touched (`touched[i]`
  // for key i), and out[i] = unconfirmed(i, segment) for a key whose segment did not confirm.
  void ConfirmIndexes(const std::vector<std::vector<SegmentId>>& touched, std::vector<Status>& out,
                      const std::function<Status(size_t, SegmentId)>& unconfirmed);
  // PutStart and UpsertStart.
  std::vector<Result<PutStartResult>> StartPuts(const std::vector<std::string>& keys,
                                                const std::vector<uint64_t>& sizes,
                                                const ReplicateConfig& config, bool upsert);
  Result<PutStartResult> PutStartOne(const std::string& key, uint64_t size,
                                     const std::string& group, const ReplicateConfig& config,
                                     bool tail, SteadyTime now);
  // Per key of a batch: whether its put is a tail (smaller than its stored parent). All
  // false without hints; the parents are looked up as one batch (one lock per shard).
  std::vector<bool> TailsOf(const std::vector<std::string>& parents,
                            const std::vector<uint64_t>& sizes);
  // UpsertStart's PutStartOne: a new pending version of an existing object, else a plain put.
  Result<PutStartResult> UpsertStartOne(const std::string& key, uint64_t size,
                                        const std::string& group, const ReplicateConfig& config,
                                        bool tail, SteadyTime now);
  // The lease deadline readers of `meta`'s current version hold (its group's for a member).
  SteadyTime LeaseDeadline(Shard& shard, const ObjectMeta& meta) const;
  void GrantLease(uint32_t shard_index, Shard& shard, ObjectMeta& meta, SteadyTime now);
  bool IsLeased(Shard& shard, const ObjectMeta& meta, SteadyTime now) const;
  // Until when the object's own lease runs (ObjectMeta::leased); SteadyTime{} if it has none.
  SteadyTime OwnLeaseDeadline(const ObjectMeta& meta) const {
    return meta.own_lease_deadline(options_.lease_ttl);
  }
  // An access that grants no lease (a put's end, an upsert's swap): the LRU clock moves,
  // unless a lease is running — its deadline (last_access + TTL) stays as granted.
  void TouchWithoutLease(ObjectMeta& meta, SteadyTime now) const {
    if (OwnLeaseDeadline(meta) > now) return;
    meta.leased = false;
    meta.last_access = now;
  }
  // Until when a recovered object may not be removed, even by force (ObjectMeta::recovered);
  // SteadyTime{} for any other.
  SteadyTime HeldUntil(const ObjectMeta& meta) const {
    return meta.recovered ? meta.put_started + options_.lease_ttl : SteadyTime{};
  }
  // When a soft pin put now with `config` lapses: SteadyTime{} without a soft pin or a TTL.
  SteadyTime SoftPinDeadline(const ReplicateConfig& config, SteadyTime now) const;
  // The eviction candidates on `segment`. `want_bytes` 0: every object of the table (the
  // policy's exact order). Otherwise a window of each shard larger than
  // kExactEvictionShardObjects, continuing where the previous window stopped, until it holds
  // kEvictionOversample times the shard's share of `want_bytes` in candidates: the policy then
  // orders a sample (as Redis's approximated LRU does), and a round costs what it evicts, not
  // the table's size. Smaller shards are walked whole.
  // `sampled` (optional) tells whether any shard was windowed rather than walked whole.
  std::vector<EvictionCandidate> CollectCandidates(SegmentId segment, SteadyTime now,
                                                   uint64_t want_bytes, bool* sampled = nullptr);

  // Evicts one candidate if still evictable; returns bytes freed on `segment`. With a tier
  // mover on the segment, objects without a disk replica are demoted (written to disk, then
  // switched to a disk replica); a group whose demotion fails for any member is dropped whole.
  uint64_t EvictCandidate(const EvictionCandidate& c, SegmentId segment, SteadyTime now);
  std::shared_ptr<TierMover> MoverOf(SegmentId segment) const;
  // Phase 3 of a tier move: attaches the disk replicas written for `items` (objects that
  // changed meanwhile are skipped) and, when `drop_memory`, frees their memory replicas on
  // `segment` unless leased. Returns memory bytes freed.
  uint64_t FinishDemotion(uint32_t shard, SegmentId segment,
                          const std::vector<std::pair<DemoteItem, uint64_t>>& items,
                          std::vector<Result<DiskLocation>>& written, bool drop_memory,
                          const std::string& group, SteadyTime now);
  // Evicts on the segments a put of `size` would use; returns bytes freed.
  // On the segments the put's tenant is placed on (its dedicated ones, else the shared ones):
  // a put never pushes out another tenant's objects.
  uint64_t EvictForPut(uint64_t size, const ReplicateConfig& config, std::string_view tenant);
  // A disk replica of `key` on `segment`; when the segment's owner keeps an index, the index
  // learns of it now (call under the object's shard lock) and of its drop later (its claim).
  Replica MakeDiskReplica(SegmentId segment, const std::string& key, const ObjectMeta& meta,
                          const DiskLocation& location);
  // Tells the owners' indexes that `meta`'s memory replicas are readable (PutEnd, PromoteEnd);
  // call under the object's shard lock.
  static void PublishCommit(const std::string& key, const ObjectMeta& meta,
                            const ReplicaList& replicas);
  // Tells the owners' indexes that `replaced` (an upsert's old version, still allocated for its
  // readers) backs its key no more, adding their segments to `published` (to be confirmed);
  // call under the object's shard lock.
  static void UnpublishReplaced(ReplicaList& replaced, std::vector<SegmentId>* published);
  // Restart recovery: adopts one reported replica; false if it was not adopted.
  // Restart recovery: adopts a store's reported entries into the table (whether each was).
  // The caller has called NotePutId with their put ids (IndexLink::Add: once per part).
  std::vector<bool> AdoptReportedAll(const Segment& segment,
                                     const std::vector<const IndexEntry*>& entries, bool disk,
                                     SteadyTime now);
  static bool Adoptable(const Segment& segment, const IndexEntry& entry, bool disk);
  bool AdoptReported(const Segment& segment, const IndexEntry& entry, bool disk, SteadyTime now);
  // With the locks of shards `a` (the key's), `home` and `where` (the shard holding the key
  // now, kNoShard if none) held; what it replaces goes to `dropped`, to be freed unlocked.
  // `range`: the memory entry's range, taken already (null: taken here).
  bool AdoptLocked(const Segment& segment, const IndexEntry& e, const HashedKey& hk, uint32_t a,
                   uint32_t home, uint32_t where, bool disk, SteadyTime now,
                   std::vector<ObjectMeta>& dropped, Allocation* range);
  void NotePutId(uint64_t put_id);  // next_put_id_ stays above every id seen

  const MasterOptions options_;
  std::shared_ptr<const EvictionPolicy> policy_;
  SegmentRegistry segments_;
  ObjectTable table_;
  // For policies that learn reuse (policy_->learns_reuse()), else null: reference counts and
  // ghosts, per shard under the shard locks.
  std::unique_ptr<ReuseTracker> reuse_;
  std::atomic<uint64_t> next_put_id_;
  std::atomic<uint64_t> evicted_objects_{0};
  std::atomic<uint64_t> evicted_bytes_{0};
  std::atomic<uint64_t> reclaimed_puts_{0};
  std::atomic<uint64_t> lease_grants_{0};
  std::atomic<uint64_t> demoted_objects_{0};
  std::atomic<uint64_t> demoted_bytes_{0};
  std::atomic<uint64_t> demotion_failures_{0};
  std::atomic<uint64_t> written_behind_{0};
  std::atomic<uint64_t> disk_replicas_dropped_{0};
  std::atomic<uint64_t> promoted_objects_{0};
  std::atomic<uint64_t> gets_{0};
  std::atomic<uint64_t> get_hits_{0};
  std::atomic<uint64_t> get_misses_{0};
  std::atomic<uint64_t> puts_{0};
  std::atomic<uint64_t> removes_{0};
  std::atomic<int64_t> last_unconfirmed_log_{0};
  // Names of indexed segments this master unmounted (IndexLink::discard_), with when; pruned
  // after an hour. Guarded by recoveries_mu_.
  std::map<std::string, SteadyTime> unmounted_names_;  // steady ms of AwaitIndexes' last warning
  std::atomic<uint64_t> recovered_replicas_{0};
  std::atomic<uint64_t> recovered_bytes_{0};
  std::atomic<uint64_t> recovery_rejected_{0};
  std::atomic<uint64_t> lost_puts_{0};
  const uint64_t first_put_id_;
  mutable std::mutex recoveries_mu_;                 // a leaf lock
  std::map<SegmentId, SegmentRecovery> recoveries_;  // guarded by recoveries_mu_
  struct Promotion {
    ReplicaList replicas;
    SteadyTime started;
  };
  std::mutex promotions_mu_;                  // a leaf lock (taken under a shard lock at most)
  std::map<uint64_t, Promotion> promotions_;  // by promotion id, guarded by promotions_mu_
  mutable std::mutex movers_mu_;              // a leaf lock: nothing else is taken while holding it
  std::map<SegmentId, std::shared_ptr<TierMover>> movers_;  // guarded by movers_mu_
  std::set<SegmentId> write_behind_segments_;               // guarded by movers_mu_
  // Copies the puts of write-behind segments: made with the first such segment (under
  // movers_mu_), then kept until the destructor, which stops it first (its thread calls
  // CopyToDisk). PutEnd reads it without the lock once has_write_behind_ is set.
  std::unique_ptr<WriteBehind> write_behind_;
  std::atomic<bool> has_write_behind_{false};
};

}  // namespace tierkv
