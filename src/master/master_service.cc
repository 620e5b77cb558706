// MasterService, part 1: segments, the two-phase put, reads and leases, removal, abandoned puts,
// stats. Eviction and demotion: master_eviction.cc; promotion, write-behind and disk-replica
// bookkeeping: master_tiering.cc.
#include "master/master_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "common/key.h"
#include "master/replica_util.h"

namespace tierkv {
namespace {

constexpr int kMaxEvictionRounds = 16;

// Lists `key` (stored in `s`, under its lock) as beginning a put or an upsert
// (Shard::pending_keys).
void NotePending(Shard& s, const std::string& key) {
  s.pending_keys.push_back(key);
  if (s.pending_keys.size() < s.pending_compact_at) return;
  std::erase_if(s.pending_keys, [&](const std::string& k) {
    auto it = s.objects.find(k);
    return it == s.objects.end() ||
           (it->second.state != ObjectState::kPending && !it->second.next());
  });
  s.pending_compact_at = std::max<size_t>(1024, 2 * s.pending_keys.size());
}

}  // namespace

MasterOptions MasterOptionsFrom(const Config& c) {
  MasterOptions o;
  o.lease_ttl = Millis(c.default_kv_lease_ttl_ms);
  o.soft_pin_ttl = Millis(c.default_kv_soft_pin_ttl_ms);
  o.high_watermark = c.eviction_high_watermark_ratio;
  o.eviction_ratio = c.eviction_ratio;
  o.put_timeout = Millis(c.put_start_discard_timeout_ms);
  o.shards = c.metadata_shards;
  // ValidateConfig accepts the known names only; anything else keeps the default (LRU).
  if (auto policy = MakeEvictionPolicy(c.eviction_policy); policy.ok()) o.policy = *policy;
  return o;
}

Millis MaintenancePeriod(const MasterOptions& options) {
  return Millis(std::clamp<int64_t>(
      std::min(options.lease_ttl.count(), options.put_timeout.count()) / 4, 10, 1000));
}

SteadyTime MasterService::SoftPinDeadline(const ReplicateConfig& config, SteadyTime now) const {
  if (!config.with_soft_pin) return SteadyTime{};
  const Millis ttl =
      config.soft_pin_ttl_ms != 0 ? Millis(config.soft_pin_ttl_ms) : options_.soft_pin_ttl;
  return ttl.count() == 0 ? SteadyTime{} : now + ttl;
}

void MasterService::RunMaintenance() {
  ReclaimAbandonedPuts();
  EvictIfNeeded();
}

MasterService::MasterService(MasterOptions options)
    : options_(std::move(options)),
      policy_(options_.policy ? options_.policy
                              : std::shared_ptr<const EvictionPolicy>(MakeDefaultEvictionPolicy())),
      segments_(options_.first_segment_id, options_.index_linger),
      table_(options_.shards, options_.lease_ttl),
      next_put_id_(options_.first_put_id == 0 ? 1 : options_.first_put_id),
      first_put_id_(options_.first_put_id == 0 ? 1 : options_.first_put_id) {
  if (policy_->learns_reuse()) {
    reuse_ = std::make_unique<ReuseTracker>(table_.num_shards(), options_.lease_ttl);
  }
}

MasterService::~MasterService() {
  write_behind_.reset();  // drains, then stops the thread that calls CopyToDisk
}

Result<SegmentId> MasterService::MountSegment(const std::string& name, uint64_t capacity) {
  return segments_.Mount(name, capacity);
}

Result<SegmentId> MasterService::MountSegment(const std::string& name, uint64_t capacity,
                                              MountOptions options) {
  return segments_.Mount(name, capacity, options);
}

Status MasterService::UnmountSegment(SegmentId id) {
  const auto seg = segments_.Find(id);
  if (Status st = segments_.Unmount(id); !st.ok()) return st;
  SetTierMover(id, nullptr);
  {
    std::lock_guard lock(recoveries_mu_);
    recoveries_.erase(id);
    if (seg && seg->feed) {  // an indexed store: if it comes back, its index is not adopted
      const SteadyTime now = options_.clock->Now();
      std::erase_if(unmounted_names_,
                    [&](const auto& e) { return now - e.second > std::chrono::hours(1); });
      unmounted_names_[seg->name] = now;
    }
  }
  RedirectList redirects;
  uint64_t dropped_objects = 0;
  for (uint32_t i = 0; i < table_.num_shards(); ++i) {
    Shard& s = table_.shard(i);
    // Declared before the lock: the dropped replicas are freed after it is released.
    std::vector<ObjectMeta> dropped;
    std::lock_guard lock(s.mu);
    std::unordered_set<std::string> dead_groups;
    auto on_segment = [id](const Replica& r) { return r.segment == id; };
    for (auto& v : s.retired) EraseReplicasIf(v.replicas, on_segment);
    std::erase_if(s.retired, [](const RetiredVersion& v) { return v.replicas.empty(); });
    for (auto it = s.objects.begin(); it != s.objects.end();) {
      auto& reps = it->second.replicas;
      EraseReplicasIf(reps, on_segment);
      if (PendingVersion* next = it->second.next(); next) {
        EraseReplicasIf(next->replicas, on_segment);
        // The upsert lost its space: its end fails.
        if (next->replicas.empty()) it->second.set_next(nullptr);
      }
      if (!reps.empty()) {
        ++it;
        continue;
      }
      if (!it->second.group_id().empty()) dead_groups.insert(it->second.group_id());
      if (!it->second.group_id().empty() && table_.ShardOf(it->first.view()) != i) {
        redirects.emplace_back(it->first.view(), i);
      }
      auto next = std::next(it);
      dropped.push_back(table_.EraseLocked(s, it));
      it = next;
    }
    // A group that lost a member loses all of them: readers never see a partial group.
    for (const auto& g : dead_groups) {
      auto git = s.groups.find(g);
      if (git == s.groups.end()) continue;
      std::vector<std::string> members(git->second.members.begin(), git->second.members.end());
      for (const auto& key : members) {
        auto it = s.objects.find(key);
        if (it == s.objects.end()) continue;
        if (table_.ShardOf(key) != i) redirects.emplace_back(key, i);
        dropped.push_back(table_.EraseLocked(s, it));
      }
    }
    dropped_objects += dropped.size();
  }
  for (const auto& [key, home] : redirects) table_.CleanupRedirect(key, home);
  spdlog::info("unmounted segment {}: dropped {} objects without replicas", id, dropped_objects);
  return Status::Ok();
}

std::vector<Result<PutStartResult>> MasterService::PutStart(const std::vector<std::string>& keys,
                                                            const std::vector<uint64_t>& sizes,
                                                            const ReplicateConfig& config) {
  return StartPuts(keys, sizes, config, /*upsert=*/false);
}

std::vector<Result<PutStartResult>> MasterService::UpsertStart(const std::vector<std::string>& keys,
                                                               const std::vector<uint64_t>& sizes,
                                                               const ReplicateConfig& config) {
  return StartPuts(keys, sizes, config, /*upsert=*/true);
}

std::vector<Result<PutStartResult>> MasterService::StartPuts(const std::vector<std::string>& keys,
                                                             const std::vector<uint64_t>& sizes,
                                                             const ReplicateConfig& config,
                                                             bool upsert) {
  const size_t n = keys.size();
  auto fail_all = [n](const std::string& why) {
    return std::vector<Result<PutStartResult>>(
        n, Result<PutStartResult>(ErrorCode::INVALID_PARAMS, why));
  };
  if (sizes.size() != n) return fail_all("keys and sizes differ in length");
  if (config.replica_num == 0) return fail_all("replica_num must be >= 1");
  if (!config.group_ids.empty() && config.group_ids.size() != n) {
    return fail_all("group_ids has " + std::to_string(config.group_ids.size()) + " entries for " +
                    std::to_string(n) + " keys");
  }
  if (!config.parent_keys.empty() && config.parent_keys.size() != n) {
    return fail_all("parent_keys has " + std::to_string(config.parent_keys.size()) +
                    " entries for " + std::to_string(n) + " keys");
  }
  std::vector<Result<PutStartResult>> results;
  results.reserve(n);
  std::unordered_map<std::string_view, uint64_t> seen;  // key -> size, of the batch so far
  const uint64_t largest = segments_.LargestCapacity();
  const SteadyTime now = options_.clock->Now();
  using RealClock = std::chrono::steady_clock;  // real time: acknowledgments come over the network
  const auto ack_deadline = RealClock::now() + options_.free_ack_wait;
  // The parent hint matters only to a policy that learns reuse.
  const std::vector<bool> tails = TailsOf(config.parent_keys, sizes);
  for (size_t i = 0; i < n; ++i) {
    const std::string& key = keys[i];
    const std::string& group = config.group_ids.empty() ? std::string() : config.group_ids[i];
    if (Status st = ValidateKey(key); !st.ok()) {
      results.emplace_back(st);
      continue;
    }
    if (!seen.emplace(key, sizes[i]).second) {
      results.emplace_back(ErrorCode::DUPLICATE_KEY, "key appears earlier in the batch: " + key);
      continue;
    }
    if (!group.empty()) {
      if (Status st = ValidateKey(group); !st.ok()) {
        results.emplace_back(ErrorCode::INVALID_PARAMS, "group id: " + st.message());
        continue;
      }
    }
    if (sizes[i] == 0) {
      results.emplace_back(ErrorCode::INVALID_PARAMS, "object size is 0");
      continue;
    }
    if (largest == 0) {
      results.emplace_back(ErrorCode::NO_AVAILABLE_HANDLE, "no segment is mounted");
      continue;
    }
    if (sizes[i] > largest) {
      results.emplace_back(ErrorCode::OBJECT_TOO_LARGE,
                           "object of " + std::to_string(sizes[i]) +
                               " bytes is larger than the largest segment (" +
                               std::to_string(largest) + " bytes)");
      continue;
    }
    // A tail's parent is often the chunk before it in the same batch, not stored yet.
    bool tail = tails[i];
    if (reuse_ && !tail && !config.parent_keys.empty() && !config.parent_keys[i].empty()) {
      auto parent = seen.find(config.parent_keys[i]);
      tail = parent != seen.end() && sizes[i] < parent->second;
    }
    auto start = [&] {
      return upsert ? UpsertStartOne(key, sizes[i], group, config, tail, now)
                    : PutStartOne(key, sizes[i], group, config, tail, now);
    };
    auto r = start();
    // Evicting cannot help when fewer segments are mounted than replicas wanted.
    if (r.code() == ErrorCode::NO_AVAILABLE_HANDLE && segments_.Count() >= config.replica_num) {
      // Freed bytes need not be contiguous: evict in rounds until the object
      // fits or nothing more can go. Bounded so one put cannot empty a segment
      // in tiny steps.
      for (int round = 0; round < kMaxEvictionRounds; ++round) {
        const bool freed = EvictForPut(sizes[i], config, TenantOfKey(key)) > 0;
        r = start();
        if (r.code() != ErrorCode::NO_AVAILABLE_HANDLE) break;
        // On segments whose owner keeps an index, what eviction (or anything else) freed is
        // quarantined until the owner acknowledges the free: wait for that, within the batch's
        // budget, rather than fail.
        const auto left = std::chrono::duration_cast<Millis>(ack_deadline - RealClock::now());
        if (left.count() > 0 && segments_.WaitForQuarantine(left)) {
          r = start();
          if (r.code() != ErrorCode::NO_AVAILABLE_HANDLE) break;
        } else if (!freed) {
          break;
        }
      }
    }
    results.push_back(std::move(r));
  }
  EvictIfNeeded();
  return results;
}

std::vector<bool> MasterService::TailsOf(const std::vector<std::string>& parents,
                                         const std::vector<uint64_t>& sizes) {
  std::vector<bool> tails(sizes.size(), false);
  if (!reuse_ || parents.empty()) return tails;
  // A parent that is not stored (or not a valid key: it cannot be) just gives no tail.
  std::vector<bool> skip(parents.size());
  for (size_t i = 0; i < parents.size(); ++i) skip[i] = parents[i].empty();
  table_.ForEachKey(
      parents, skip,
      [&](size_t i, uint32_t, Shard&, ObjectMeta& meta) { tails[i] = sizes[i] < meta.size; },
      [](size_t) {});
  return tails;
}

Result<PutStartResult> MasterService::PutStartOne(const std::string& key, uint64_t size,
                                                  const std::string& group,
                                                  const ReplicateConfig& config, bool tail,
                                                  SteadyTime now) {
  const uint32_t a = table_.ShardOf(key);
  const uint32_t home = table_.HomeShard(key, group);
  Shard& ks = table_.shard(a);
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint32_t seen_redirect = kNoShard;
    {
      std::lock_guard lock(ks.mu);
      if (ks.objects.contains(key)) return Status(ErrorCode::OBJECT_ALREADY_EXISTS, key);
      auto r = ks.redirects.find(key);
      if (r != ks.redirects.end()) seen_redirect = r->second;
    }
    std::vector<uint32_t> wanted{a, home};
    if (seen_redirect != kNoShard) wanted.push_back(seen_redirect);
    auto locks = table_.LockShards(wanted);
    if (ks.objects.contains(key)) return Status(ErrorCode::OBJECT_ALREADY_EXISTS, key);
    auto r = ks.redirects.find(key);
    if (r != ks.redirects.end()) {
      if (r->second != seen_redirect) continue;  // moved while unlocked: retry
      if (table_.shard(r->second).objects.contains(key)) {
        return Status(ErrorCode::OBJECT_ALREADY_EXISTS, key);
      }
      ks.redirects.erase(r);  // stale
    }
    Shard& hs = table_.shard(home);
    if (hs.objects.contains(key)) return Status(ErrorCode::OBJECT_ALREADY_EXISTS, key);

    auto placed = segments_.Allocate(size, config.replica_num, config.preferred_segment,
                                     config.excluded_segments, now, TenantOfKey(key));
    if (!placed.ok()) return placed.status();
    ObjectMeta meta;
    meta.size = size;
    meta.put_id = next_put_id_.fetch_add(1, std::memory_order_relaxed);
    meta.state = ObjectState::kPending;
    meta.soft_pin = config.with_soft_pin;
    meta.set_soft_pin_until(SoftPinDeadline(config, now));
    meta.hard_pin = config.with_hard_pin;
    meta.set_group_id(group);
    meta.put_started = now;
    meta.last_access = now;
    if (reuse_) reuse_->OnPut(home, HashKey(key), tail, meta, now);
    PutStartResult out;
    out.put_id = meta.put_id;
    for (auto& p : *placed) {
      out.replicas.push_back(
          ReplicaLocation{p.segment, ReplicaTier::kMemory, p.allocation.offset(), size});
      meta.replicas.push_back(Replica{p.segment, ReplicaTier::kMemory, std::move(p.allocation)});
    }
    if (!group.empty()) hs.groups[group].members.insert(key);
    hs.objects.emplace(key, std::move(meta));
    NotePending(hs, key);
    if (home != a) ks.redirects[key] = home;
    return out;
  }
  return Status(ErrorCode::INTERNAL_ERROR, "put of " + key + " kept racing a concurrent put");
}

SteadyTime MasterService::LeaseDeadline(Shard& shard, const ObjectMeta& meta) const {
  SteadyTime deadline = OwnLeaseDeadline(meta);
  if (!meta.group_id().empty()) {
    auto g = shard.groups.find(meta.group_id());
    if (g != shard.groups.end()) deadline = std::max(deadline, g->second.lease_deadline);
  }
  return deadline;
}

Result<PutStartResult> MasterService::UpsertStartOne(const std::string& key, uint64_t size,
                                                     const std::string& group,
                                                     const ReplicateConfig& config, bool tail,
                                                     SteadyTime now) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    Result<PutStartResult> result(ErrorCode::INTERNAL_ERROR, "upsert of " + key);
    const bool found = table_.WithObject(key, [&](uint32_t, Shard& s, ObjectMeta& meta) {
      if (meta.state != ObjectState::kComplete || meta.next()) {
        result = Status(ErrorCode::REPLICA_IS_NOT_READY,
                        "a put or upsert of " + key + " is in progress");
        return;
      }
      if (meta.group_id() != group) {
        result = Status(ErrorCode::INVALID_PARAMS,
                        "upsert of " + key + " names group '" + group + "' but the object is in '" +
                            meta.group_id() + "' (an upsert keeps the object's group)");
        return;
      }
      // shard -> registry -> allocator: the lock order of a put.
      auto placed = segments_.Allocate(size, config.replica_num, config.preferred_segment,
                                       config.excluded_segments, now, TenantOfKey(key));
      if (!placed.ok()) {
        result = placed.status();
        return;
      }
      auto next = std::make_unique<PendingVersion>();
      next->size = size;
      next->put_id = next_put_id_.fetch_add(1, std::memory_order_relaxed);
      next->soft_pin = config.with_soft_pin;
      next->soft_pin_until = SoftPinDeadline(config, now);
      next->hard_pin = config.with_hard_pin;
      next->put_started = now;
      PutStartResult out;
      out.put_id = next->put_id;
      for (auto& p : *placed) {
        out.replicas.push_back(
            ReplicaLocation{p.segment, ReplicaTier::kMemory, p.allocation.offset(), size});
        next->replicas.push_back(Replica{p.segment, ReplicaTier::kMemory, std::move(p.allocation)});
      }
      meta.set_next(std::move(next));
      NotePending(s, key);
      result = std::move(out);
    });
    if (found) return result;
    // Not there: a plain put, unless someone put it meanwhile (then upsert that one). An upsert
    // of an existing object keeps its reuse counts and tail flag (the same chunk, new bytes).
    auto put = PutStartOne(key, size, group, config, tail, now);
    if (put.ok()) {
      // An older version of the key may still be in a store's index (evicted, with its free on
      // the way): this put's end waits for every store, not only its own.
      table_.WithObject(key, [&](uint32_t, Shard&, ObjectMeta& meta) {
        if (meta.put_id == put->put_id) meta.confirm_all = true;
      });
    }
    if (put.code() != ErrorCode::OBJECT_ALREADY_EXISTS) return put;
  }
  return Status(ErrorCode::INTERNAL_ERROR, "upsert of " + key + " kept racing a concurrent put");
}

std::vector<Status> MasterService::PutEnd(const std::vector<std::string>& keys,
                                          const std::vector<uint64_t>& put_ids,
                                          const std::vector<uint64_t>& checksums) {
  std::vector<Status> out;
  out.reserve(keys.size());
  std::vector<std::vector<SegmentId>> published(keys.size());
  uint64_t ended = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i >= put_ids.size() || i >= checksums.size()) {
      out.emplace_back(ErrorCode::INVALID_PARAMS, "put_ids/checksums shorter than keys");
      continue;
    }
    out.push_back(EndPut(keys[i], put_ids[i], checksums[i], EndKind::kEnd, &published[i]));
    if (out.back().ok()) ++ended;
  }
  puts_.fetch_add(ended, std::memory_order_relaxed);
  if (ended > 0 && has_write_behind_.load(std::memory_order_acquire)) {
    std::vector<std::string> done;
    done.reserve(ended);
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].ok()) done.push_back(keys[i]);
    }
    write_behind_->Enqueue(done);  // copied to the tiers of write-behind segments only
  }
  // An upsert is acknowledged once the stores of its new version have it in their indexes: a
  // master taking over recovers the newer put from them, never the version it replaced.
  ConfirmIndexes(published, out, [&](size_t i, SegmentId id) {
    return Status(ErrorCode::TRANSFER_FAIL,
                  "upsert of " + keys[i] + ": segment " + std::to_string(id) +
                      " did not confirm the upsert within " +
                      std::to_string(options_.free_ack_wait.count()) +
                      " ms (its store is unreachable from the master?): a master that takes "
                      "over may serve the previous version");
  });
  return out;
}

std::vector<Status> MasterService::PutRevoke(const std::vector<std::string>& keys,
                                             const std::vector<uint64_t>& put_ids,
                                             const std::vector<SegmentId>& unreachable) {
  const SteadyTime until = options_.clock->Now() + options_.unreachable_hold;
  for (SegmentId id : unreachable) {
    if (segments_.MarkUnreachable(id, until)) {
      spdlog::warn("segment {} reported unreachable by a writer: placement avoids it for {} ms", id,
                   options_.unreachable_hold.count());
    }
  }
  std::vector<Status> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i >= put_ids.size()) {
      out.emplace_back(ErrorCode::INVALID_PARAMS, "put_ids shorter than keys");
      continue;
    }
    out.push_back(EndPut(keys[i], put_ids[i], 0, EndKind::kRevoke));
  }
  return out;
}

Status MasterService::EndPut(const std::string& key, uint64_t put_id, uint64_t checksum,
                             EndKind kind, std::vector<SegmentId>* published) {
  if (Status st = ValidateKey(key); !st.ok()) return st;
  Status result(ErrorCode::OBJECT_NOT_FOUND, "no pending put of " + key);
  std::optional<ObjectMeta> revoked;
  std::unique_ptr<PendingVersion> dropped_next;  // freed after the shard lock is released
  std::vector<ReplicaList> dropped;
  uint32_t home = 0;
  const SteadyTime now = options_.clock->Now();
  table_.WithObject(key, [&](uint32_t idx, Shard& s, ObjectMeta& meta) {
    if (meta.next() && meta.next()->put_id == put_id) {
      if (kind == EndKind::kRevoke) {
        dropped_next = meta.take_next();
        result = Status::Ok();
        return;
      }
      // Publish the new version in one step under the shard lock. Readers that asked before
      // hold a lease on the old replicas: those stay allocated until it ends.
      std::unique_ptr<PendingVersion> next = meta.take_next();
      ReplicaList old = std::move(meta.replicas);
      const SteadyTime old_lease = LeaseDeadline(s, meta);
      const uint64_t old_put_id = meta.put_id;
      meta.replicas = std::move(next->replicas);
      meta.size = next->size;
      meta.checksum = checksum;
      meta.put_id = next->put_id;
      meta.soft_pin = next->soft_pin;
      meta.set_soft_pin_until(next->soft_pin_until);
      meta.hard_pin = next->hard_pin;
      meta.disk_hits = 0;
      meta.set_promotion_id(0);  // a promotion of the old version no longer applies
      TouchWithoutLease(meta, now);
      // Under the shard lock, before the old version's free (Retire, or the end of its last
      // lease): the owners' indexes learn the new version first, so a restart in between finds
      // both and keeps the newer put.
      PublishCommit(key, meta, meta.replicas);
      if (published != nullptr) {
        for (const Replica& r : meta.replicas) published->push_back(r.segment);
      }
      // ... and forget the old one now, not at its last lease's end (a group's lease can last
      // as long as the group is read): a master taking over must not find the old version in
      // one index before the new one in another.
      UnpublishReplaced(old, published);
      if (meta.demoting) {
        // A tier move is reading the old memory: park it under the old put id, for
        // FinishDemotion to retire once the move is done.
        s.parked.insert_or_assign(old_put_id, ParkedVersion{std::move(old), old_lease});
        meta.demoting = false;
      } else {
        Retire(s, std::move(old), old_lease, now, dropped);
      }
      result = Status::Ok();
    } else if (meta.state != ObjectState::kPending) {
      result = Status(ErrorCode::INVALID_WRITE, "put of " + key + " already ended");
    } else if (meta.put_id != put_id) {
      result =
          Status(ErrorCode::INVALID_WRITE, "pending put of " + key + " belongs to another writer");
    } else if (kind == EndKind::kEnd) {
      meta.state = ObjectState::kComplete;
      meta.checksum = checksum;
      TouchWithoutLease(meta, now);
      // Under the shard lock: the commit reaches the owners' indexes before any free of it.
      PublishCommit(key, meta, meta.replicas);
      if (meta.confirm_all && published != nullptr) {
        // An upsert that found no object: an evicted older version's free (or disk drop) may
        // not have reached its store's index yet, and a master taking over would serve that
        // version. Confirmed like an upsert, on every indexed segment (AwaitIndexes skips the
        // others).
        for (const SegmentUsage& u : segments_.Usage()) published->push_back(u.id);
      }
      meta.confirm_all = false;
      result = Status::Ok();
    } else {
      home = idx;
      revoked = table_.EraseLocked(s, s.objects.find(key));
      result = Status::Ok();
    }
  });
  if (revoked && !revoked->group_id().empty()) table_.CleanupRedirect(key, home);
  if (kind == EndKind::kEnd && put_id < first_put_id_ &&
      result.code() == ErrorCode::OBJECT_NOT_FOUND) {
    // Started on a previous master and not recovered (its put had not ended there): lost.
    lost_puts_.fetch_add(1, std::memory_order_relaxed);
    result = Status(ErrorCode::OBJECT_NOT_FOUND,
                    "the put of " + key +
                        " was started on a previous master, which this one replaced before the "
                        "put ended; put it again");
  }
  return result;
}

void MasterService::PublishCommit(const std::string& key, const ObjectMeta& meta,
                                  const ReplicaList& replicas) {
  for (const Replica& r : replicas) {
    if (r.tier != ReplicaTier::kMemory || r.allocation.owner() == nullptr) continue;
    // Only SegmentFeeds fence the master's allocators (SegmentRegistry::Mount).
    auto* feed = static_cast<SegmentFeed*>(r.allocation.owner()->fence());
    if (feed == nullptr) continue;
    IndexEntry e = IndexEntryOf(key, meta);
    e.offset = r.allocation.offset();
    feed->Committed(std::move(e));
  }
}

void MasterService::UnpublishReplaced(ReplicaList& replaced, std::vector<SegmentId>* published) {
  for (Replica& r : replaced) {
    if (r.tier == ReplicaTier::kMemory) {
      if (r.allocation.owner() == nullptr) continue;
      auto* feed = static_cast<SegmentFeed*>(r.allocation.owner()->fence());
      if (feed == nullptr) continue;
      feed->Forgotten(r.allocation.offset());
    } else {
      if (!r.claim) continue;
      r.claim.reset();  // the owner's index drops the record now (DiskClaim's destructor)
    }
    if (published != nullptr) published->push_back(r.segment);
  }
}

void MasterService::GrantLease(uint32_t shard_index, Shard& shard, ObjectMeta& meta,
                               SteadyTime now) {
  const SteadyTime deadline = now + options_.lease_ttl;
  // The clock only moves forward: the object's own lease (last_access + TTL) never shortens.
  meta.last_access = std::max(meta.last_access, now);
  if (reuse_) reuse_->OnReference(shard_index, meta, now);
  if (meta.group_id().empty()) {
    meta.leased = true;
    return;
  }
  auto g = shard.groups.find(meta.group_id());
  if (g != shard.groups.end())
    g->second.lease_deadline = std::max(g->second.lease_deadline, deadline);
}

bool MasterService::IsLeased(Shard& shard, const ObjectMeta& meta, SteadyTime now) const {
  if (OwnLeaseDeadline(meta) > now) return true;
  if (meta.group_id().empty()) return false;
  auto g = shard.groups.find(meta.group_id());
  return g != shard.groups.end() && g->second.lease_deadline > now;
}

template <typename Keys>
std::vector<int> MasterService::ExistsOf(const Keys& keys) {
  std::vector<int> out(keys.size(), 0);
  std::vector<bool> skip(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    // The caller's key bytes are usually cold: fetch a few keys ahead.
    if (i + 8 < keys.size()) __builtin_prefetch(keys[i + 8].data());
    if (Status st = ValidateKey(keys[i]); !st.ok()) {
      out[i] = ToInt(st.code());
      skip[i] = true;
    }
  }
  const SteadyTime now = options_.clock->Now();
  uint64_t grants = 0;
  table_.ForEachKey(
      keys, skip,
      [&](size_t i, uint32_t shard_index, Shard& s, ObjectMeta& meta) {
        if (meta.state != ObjectState::kComplete) return;
        GrantLease(shard_index, s, meta, now);
        ++grants;
        out[i] = 1;
      },
      [](size_t) {}, ObjectMap::EntryReads::kLease);
  lease_grants_.fetch_add(grants, std::memory_order_relaxed);
  return out;
}

std::vector<int> MasterService::Exists(const std::vector<std::string>& keys) {
  return ExistsOf(keys);
}

std::vector<int> MasterService::ExistsViews(std::span<const std::string_view> keys) {
  return ExistsOf(keys);
}

std::vector<Result<ObjectReplicas>> MasterService::GetReplicas(
    const std::vector<std::string>& keys) {
  std::vector<Result<ObjectReplicas>> out;
  out.reserve(keys.size());
  std::vector<bool> skip(keys.size(), false);
  for (size_t i = 0; i < keys.size(); ++i) {
    Status st = ValidateKey(keys[i]);
    skip[i] = !st.ok();
    if (skip[i]) {
      out.emplace_back(std::move(st));
    } else {
      out.emplace_back(ErrorCode::OBJECT_NOT_FOUND, keys[i]);
    }
  }
  const SteadyTime now = options_.clock->Now();
  uint64_t grants = 0;
  uint64_t valid = 0;
  for (const bool skipped : skip) valid += skipped ? 0 : 1;
  table_.ForEachKey(
      keys, skip,
      [&](size_t i, uint32_t shard_index, Shard& s, ObjectMeta& meta) {
        if (meta.state != ObjectState::kComplete) {
          out[i] = Result<ObjectReplicas>(ErrorCode::REPLICA_IS_NOT_READY,
                                          "put of " + keys[i] + " has not ended");
          return;
        }
        GrantLease(shard_index, s, meta, now);
        ++grants;
        ObjectReplicas rep;
        rep.size = meta.size;
        rep.checksum = meta.checksum;
        rep.lease_deadline = now + options_.lease_ttl;
        // Memory replicas first: readers try them in order.
        for (const auto& replica : meta.replicas) {
          rep.replicas.push_back(ReplicaLocation{replica.segment, replica.tier,
                                                 replica.memory_offset(), meta.size,
                                                 replica.disk_location()});
        }
        std::stable_partition(rep.replicas.begin(), rep.replicas.end(),
                              [](const auto& r) { return r.tier == ReplicaTier::kMemory; });
        out[i] = std::move(rep);
      },
      [](size_t) {});
  lease_grants_.fetch_add(grants, std::memory_order_relaxed);
  // Every complete object found got a lease: grants are the hits.
  gets_.fetch_add(keys.size(), std::memory_order_relaxed);
  get_hits_.fetch_add(grants, std::memory_order_relaxed);
  get_misses_.fetch_add(valid - grants, std::memory_order_relaxed);
  return out;
}

uint64_t MasterService::ReclaimAbandonedPuts() {
  const SteadyTime now = options_.clock->Now();
  // Promotions whose requester never ended them: free their memory ranges (the object's
  // promotion_id then matches nothing, and a late PromoteEnd finds no range).
  {
    std::vector<Promotion> freed;  // declared before the lock: freed after it is released
    std::lock_guard lock(promotions_mu_);
    for (auto it = promotions_.begin(); it != promotions_.end();) {
      if (it->second.started + options_.put_timeout > now) {
        ++it;
        continue;
      }
      spdlog::warn("reclaiming abandoned promotion {}", it->first);
      freed.push_back(std::move(it->second));
      it = promotions_.erase(it);
    }
  }
  // Only the keys that began a put or an upsert since the last visit (Shard::pending_keys),
  // not every object: at 10 M objects a full scan each period kept the master busy.
  uint64_t count = 0;
  RedirectList redirects;
  for (uint32_t i = 0; i < table_.num_shards(); ++i) {
    Shard& s = table_.shard(i);
    std::vector<std::unique_ptr<PendingVersion>> stale;  // freed after the lock is released
    std::vector<RetiredVersion> expired;
    std::lock_guard lock(s.mu);
    std::vector<std::string> keys;
    keys.swap(s.pending_keys);
    for (std::string& key : keys) {
      auto it = s.objects.find(key);
      if (it == s.objects.end()) continue;  // removed, or reclaimed through a duplicate entry
      ObjectMeta& meta = it->second;
      if (meta.state == ObjectState::kPending) {
        if (meta.put_started + options_.put_timeout > now) {
          s.pending_keys.push_back(std::move(key));  // still within its time
          continue;
        }
        spdlog::warn("reclaiming abandoned put of {} ({} bytes)", key, meta.size);
        if (!meta.group_id().empty() && table_.ShardOf(key) != i) redirects.emplace_back(key, i);
        table_.EraseLocked(s, it);
        ++count;
        continue;
      }
      if (!meta.next()) continue;  // its put or upsert ended
      if (meta.next()->put_started + options_.put_timeout > now) {
        s.pending_keys.push_back(std::move(key));
        continue;
      }
      spdlog::warn("reclaiming abandoned upsert of {} ({} bytes)", key, meta.next()->size);
      stale.push_back(meta.take_next());
      ++count;
    }
    // Replaced versions whose last lease has ended.
    for (auto it = s.retired.begin(); it != s.retired.end();) {
      if (it->free_after > now) {
        ++it;
        continue;
      }
      expired.push_back(std::move(*it));
      it = s.retired.erase(it);
    }
  }
  for (const auto& [key, home] : redirects) table_.CleanupRedirect(key, home);
  reclaimed_puts_.fetch_add(count, std::memory_order_relaxed);
  return count;
}

MasterStats MasterService::Stats() { return Stats(nullptr); }

MasterStats MasterService::Stats(std::map<std::string, MasterStats>* by_tenant) {
  MasterStats st;
  for (uint32_t i = 0; i < table_.num_shards(); ++i) {
    Shard& s = table_.shard(i);
    std::lock_guard lock(s.mu);
    st.objects += s.objects.size();
    st.groups += s.groups.size();
    for (const auto& [key, meta] : s.objects) {
      MasterStats* tenant =
          by_tenant ? &(*by_tenant)[std::string(TenantOfKey(key.view()))] : nullptr;
      if (tenant != nullptr) ++tenant->objects;
      if (meta.state == ObjectState::kPending) {
        ++st.pending_objects;
        if (tenant != nullptr) ++tenant->pending_objects;
      }
      for (const auto& r : meta.replicas) {
        const bool memory = r.tier == ReplicaTier::kMemory;
        ++(memory ? st.memory_replicas : st.disk_replicas);
        if (tenant != nullptr) ++(memory ? tenant->memory_replicas : tenant->disk_replicas);
      }
    }
  }
  st.evicted_objects = evicted_objects_.load();
  st.evicted_bytes = evicted_bytes_.load();
  st.reclaimed_puts = reclaimed_puts_.load();
  st.lease_grants = lease_grants_.load();
  st.demoted_objects = demoted_objects_.load();
  st.demoted_bytes = demoted_bytes_.load();
  st.demotion_failures = demotion_failures_.load();
  st.written_behind = written_behind_.load();
  st.disk_replicas_dropped = disk_replicas_dropped_.load();
  st.promoted_objects = promoted_objects_.load();
  st.gets = gets_.load();
  st.get_hits = get_hits_.load();
  st.get_misses = get_misses_.load();
  st.puts = puts_.load();
  st.removes = removes_.load();
  st.recovered_replicas = recovered_replicas_.load();
  st.recovered_bytes = recovered_bytes_.load();
  st.recovery_rejected = recovery_rejected_.load();
  st.lost_puts = lost_puts_.load();
  return st;
}

}  // namespace tierkv
