#include "master/master_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_set>

#include "common/key.h"

namespace tierkv {
namespace {

constexpr uint32_t kNoShard = UINT32_MAX;
constexpr int kMaxEvictionRounds = 16;

// (key, home shard) pairs whose redirect may need cleaning once locks are gone.
using RedirectList = std::vector<std::pair<std::string, uint32_t>>;

// Memory bytes `meta` holds on `segment` (disk replicas hold none).
uint64_t BytesOnSegment(const ObjectMeta& meta, SegmentId segment) {
  uint64_t bytes = 0;
  for (const auto& r : meta.replicas) {
    if (r.segment == segment && r.tier == ReplicaTier::kMemory) bytes += r.allocation.size();
  }
  return bytes;
}

bool HasDiskReplica(const ObjectMeta& meta) {
  return std::any_of(meta.replicas.begin(), meta.replicas.end(),
                     [](const Replica& r) { return r.tier == ReplicaTier::kDisk; });
}

const Replica* MemoryReplicaOn(const ObjectMeta& meta, SegmentId segment) {
  for (const auto& r : meta.replicas) {
    if (r.segment == segment && r.tier == ReplicaTier::kMemory) return &r;
  }
  return nullptr;
}

// Frees `meta`'s memory replicas on `segment`; returns the bytes freed.
uint64_t DropMemoryReplicas(ObjectMeta& meta, SegmentId segment) {
  const uint64_t bytes = BytesOnSegment(meta, segment);
  std::erase_if(meta.replicas, [segment](const Replica& r) {
    return r.segment == segment && r.tier == ReplicaTier::kMemory;
  });
  return bytes;
}

// Erases, shard by shard, every object for which pred(shard, key, meta) holds,
// then cleans the redirects of erased grouped keys; returns how many.
template <typename Pred>
uint64_t EraseWhere(ObjectTable& table, Pred&& pred) {
  RedirectList redirects;
  uint64_t count = 0;
  for (uint32_t i = 0; i < table.num_shards(); ++i) {
    Shard& s = table.shard(i);
    std::lock_guard lock(s.mu);
    for (auto it = s.objects.begin(); it != s.objects.end();) {
      if (!pred(s, it->first, it->second)) {
        ++it;
        continue;
      }
      if (!it->second.group_id.empty() && table.ShardOf(it->first.str) != i) {
        redirects.emplace_back(it->first.str, i);
      }
      auto next = std::next(it);
      table.EraseLocked(s, it);
      it = next;
      ++count;
    }
  }
  for (const auto& [key, home] : redirects) table.CleanupRedirect(key, home);
  return count;
}

}  // namespace

MasterService::MasterService(MasterOptions options)
    : options_(std::move(options)),
      policy_(options_.policy ? options_.policy
                              : std::shared_ptr<const EvictionPolicy>(MakeDefaultEvictionPolicy())),
      segments_(options_.first_segment_id),
      table_(options_.shards) {}

MasterService::~MasterService() = default;

Result<SegmentId> MasterService::MountSegment(const std::string& name, uint64_t capacity) {
  return segments_.Mount(name, capacity);
}

Status MasterService::UnmountSegment(SegmentId id) {
  if (Status st = segments_.Unmount(id); !st.ok()) return st;
  SetTierMover(id, nullptr);
  RedirectList redirects;
  uint64_t dropped_objects = 0;
  for (uint32_t i = 0; i < table_.num_shards(); ++i) {
    Shard& s = table_.shard(i);
    // Declared before the lock: the dropped replicas are freed after it is released.
    std::vector<ObjectMeta> dropped;
    std::lock_guard lock(s.mu);
    std::unordered_set<std::string> dead_groups;
    for (auto it = s.objects.begin(); it != s.objects.end();) {
      auto& reps = it->second.replicas;
      std::erase_if(reps, [id](const Replica& r) { return r.segment == id; });
      if (!reps.empty()) {
        ++it;
        continue;
      }
      if (!it->second.group_id.empty()) dead_groups.insert(it->second.group_id);
      if (!it->second.group_id.empty() && table_.ShardOf(it->first.str) != i) {
        redirects.emplace_back(it->first.str, i);
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
  std::vector<Result<PutStartResult>> results;
  results.reserve(n);
  std::unordered_set<std::string_view> seen;
  const uint64_t largest = segments_.LargestCapacity();
  const SteadyTime now = options_.clock->Now();
  for (size_t i = 0; i < n; ++i) {
    const std::string& key = keys[i];
    const std::string& group = config.group_ids.empty() ? std::string() : config.group_ids[i];
    if (Status st = ValidateKey(key); !st.ok()) {
      results.emplace_back(st);
      continue;
    }
    if (!seen.insert(key).second) {
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
    auto r = PutStartOne(key, sizes[i], group, config, now);
    // Evicting cannot help when fewer segments are mounted than replicas wanted.
    if (r.code() == ErrorCode::NO_AVAILABLE_HANDLE && segments_.Count() >= config.replica_num) {
      // Freed bytes need not be contiguous: evict in rounds until the object
      // fits or nothing more can go. Bounded so one put cannot empty a segment
      // in tiny steps.
      for (int round = 0; round < kMaxEvictionRounds; ++round) {
        if (EvictForPut(sizes[i], config) == 0) break;
        r = PutStartOne(key, sizes[i], group, config, now);
        if (r.code() != ErrorCode::NO_AVAILABLE_HANDLE) break;
      }
    }
    results.push_back(std::move(r));
  }
  EvictIfNeeded();
  return results;
}

Result<PutStartResult> MasterService::PutStartOne(const std::string& key, uint64_t size,
                                                  const std::string& group,
                                                  const ReplicateConfig& config, SteadyTime now) {
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

    auto placed = segments_.Allocate(size, config.replica_num, config.preferred_segment);
    if (!placed.ok()) return placed.status();
    ObjectMeta meta;
    meta.size = size;
    meta.put_id = next_put_id_.fetch_add(1, std::memory_order_relaxed);
    meta.state = ObjectState::kPending;
    meta.soft_pin = config.with_soft_pin;
    meta.hard_pin = config.with_hard_pin;
    meta.group_id = group;
    meta.put_started = now;
    meta.last_access = now;
    PutStartResult out;
    out.put_id = meta.put_id;
    for (auto& p : *placed) {
      out.replicas.push_back(
          ReplicaLocation{p.segment, ReplicaTier::kMemory, p.allocation.offset(), size});
      meta.replicas.push_back(Replica{p.segment, ReplicaTier::kMemory, std::move(p.allocation)});
    }
    if (!group.empty()) hs.groups[group].members.insert(key);
    hs.objects.emplace(StoredKey(key), std::move(meta));
    if (home != a) ks.redirects[key] = home;
    return out;
  }
  return Status(ErrorCode::INTERNAL_ERROR, "put of " + key + " kept racing a concurrent put");
}

uint64_t MasterService::EvictForPut(uint64_t size, const ReplicateConfig& config) {
  auto usage = segments_.Usage();
  std::sort(usage.begin(), usage.end(), [&](const SegmentUsage& x, const SegmentUsage& y) {
    const bool px = IsPreferred(x.name, config.preferred_segment);
    const bool py = IsPreferred(y.name, config.preferred_segment);
    if (px != py) return px;
    return x.capacity - x.used > y.capacity - y.used;
  });
  uint64_t freed = 0;
  for (size_t i = 0; i < usage.size() && i < config.replica_num; ++i) {
    const auto target = size + static_cast<uint64_t>(options_.eviction_ratio *
                                                     static_cast<double>(usage[i].capacity));
    freed += EvictFromSegment(usage[i].id, target);
  }
  return freed;
}

std::vector<Status> MasterService::PutEnd(const std::vector<std::string>& keys,
                                          const std::vector<uint64_t>& put_ids,
                                          const std::vector<uint64_t>& checksums) {
  std::vector<Status> out;
  out.reserve(keys.size());
  uint64_t ended = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i >= put_ids.size() || i >= checksums.size()) {
      out.emplace_back(ErrorCode::INVALID_PARAMS, "put_ids/checksums shorter than keys");
      continue;
    }
    out.push_back(EndPut(keys[i], put_ids[i], checksums[i], EndKind::kEnd));
    if (out.back().ok()) ++ended;
  }
  puts_.fetch_add(ended, std::memory_order_relaxed);
  return out;
}

std::vector<Status> MasterService::PutRevoke(const std::vector<std::string>& keys,
                                             const std::vector<uint64_t>& put_ids) {
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
                             EndKind kind) {
  if (Status st = ValidateKey(key); !st.ok()) return st;
  Status result(ErrorCode::OBJECT_NOT_FOUND, "no pending put of " + key);
  std::optional<ObjectMeta> revoked;
  uint32_t home = 0;
  const SteadyTime now = options_.clock->Now();
  table_.WithObject(key, [&](uint32_t idx, Shard& s, ObjectMeta& meta) {
    if (meta.state != ObjectState::kPending) {
      result = Status(ErrorCode::INVALID_WRITE, "put of " + key + " already ended");
    } else if (meta.put_id != put_id) {
      result =
          Status(ErrorCode::INVALID_WRITE, "pending put of " + key + " belongs to another writer");
    } else if (kind == EndKind::kEnd) {
      meta.state = ObjectState::kComplete;
      meta.checksum = checksum;
      meta.last_access = now;
      result = Status::Ok();
    } else {
      home = idx;
      revoked = table_.EraseLocked(s, s.objects.find(key));
      result = Status::Ok();
    }
  });
  if (revoked && !revoked->group_id.empty()) table_.CleanupRedirect(key, home);
  return result;
}

void MasterService::GrantLease(Shard& shard, ObjectMeta& meta, SteadyTime now) {
  const SteadyTime deadline = now + options_.lease_ttl;
  meta.last_access = now;
  if (meta.group_id.empty()) {
    meta.lease_deadline = std::max(meta.lease_deadline, deadline);
    return;
  }
  auto g = shard.groups.find(meta.group_id);
  if (g != shard.groups.end())
    g->second.lease_deadline = std::max(g->second.lease_deadline, deadline);
}

bool MasterService::IsLeased(Shard& shard, const ObjectMeta& meta, SteadyTime now) const {
  if (meta.lease_deadline > now) return true;
  if (meta.group_id.empty()) return false;
  auto g = shard.groups.find(meta.group_id);
  return g != shard.groups.end() && g->second.lease_deadline > now;
}

std::vector<int> MasterService::Exists(const std::vector<std::string>& keys) {
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
      [&](size_t i, uint32_t, Shard& s, ObjectMeta& meta) {
        if (meta.state != ObjectState::kComplete) return;
        GrantLease(s, meta, now);
        ++grants;
        out[i] = 1;
      },
      [](size_t) {});
  lease_grants_.fetch_add(grants, std::memory_order_relaxed);
  return out;
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
      [&](size_t i, uint32_t, Shard& s, ObjectMeta& meta) {
        if (meta.state != ObjectState::kComplete) {
          out[i] = Result<ObjectReplicas>(ErrorCode::REPLICA_IS_NOT_READY,
                                          "put of " + keys[i] + " has not ended");
          return;
        }
        GrantLease(s, meta, now);
        ++grants;
        ObjectReplicas rep;
        rep.size = meta.size;
        rep.checksum = meta.checksum;
        rep.lease_deadline = now + options_.lease_ttl;
        // Memory replicas first: readers try them in order.
        for (const auto& replica : meta.replicas) {
          rep.replicas.push_back(ReplicaLocation{
              replica.segment, replica.tier, replica.allocation.offset(), meta.size, replica.disk});
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

Status MasterService::Remove(const std::string& key, bool force) {
  if (Status st = ValidateKey(key); !st.ok()) return st;
  Status result(ErrorCode::OBJECT_NOT_FOUND, key);
  std::optional<ObjectMeta> removed;
  uint32_t home = 0;
  const SteadyTime now = options_.clock->Now();
  table_.WithObject(key, [&](uint32_t idx, Shard& s, ObjectMeta& meta) {
    if (meta.state != ObjectState::kComplete) {
      result = Status(ErrorCode::REPLICA_IS_NOT_READY, "put of " + key + " is in progress");
    } else if (!force && IsLeased(s, meta, now)) {
      result = Status(ErrorCode::OBJECT_HAS_LEASE, key + " is leased by a reader");
    } else {
      home = idx;
      removed = table_.EraseLocked(s, s.objects.find(key));
      result = Status::Ok();
    }
  });
  if (removed && !removed->group_id.empty()) table_.CleanupRedirect(key, home);
  if (removed) removes_.fetch_add(1, std::memory_order_relaxed);
  return result;
}

uint64_t MasterService::RemoveAll(bool force) {
  const SteadyTime now = options_.clock->Now();
  const uint64_t removed =
      EraseWhere(table_, [&](Shard& s, const StoredKey&, const ObjectMeta& meta) {
        return meta.state == ObjectState::kComplete && (force || !IsLeased(s, meta, now));
      });
  removes_.fetch_add(removed, std::memory_order_relaxed);
  return removed;
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
  const uint64_t count =
      EraseWhere(table_, [&](Shard&, const StoredKey& key, const ObjectMeta& meta) {
        if (meta.state != ObjectState::kPending || meta.put_started + options_.put_timeout > now) {
          return false;
        }
        spdlog::warn("reclaiming abandoned put of {} ({} bytes)", key.str, meta.size);
        return true;
      });
  reclaimed_puts_.fetch_add(count, std::memory_order_relaxed);
  return count;
}

uint64_t MasterService::EvictIfNeeded() {
  uint64_t freed = 0;
  for (const auto& u : segments_.Usage()) {
    const double cap = static_cast<double>(u.capacity);
    if (static_cast<double>(u.used) <= options_.high_watermark * cap) continue;
    const uint64_t target = u.used - static_cast<uint64_t>(options_.high_watermark * cap) +
                            static_cast<uint64_t>(options_.eviction_ratio * cap);
    freed += EvictFromSegment(u.id, target);
  }
  return freed;
}

std::vector<EvictionCandidate> MasterService::CollectCandidates(SegmentId segment, SteadyTime now) {
  std::vector<EvictionCandidate> out;
  for (uint32_t i = 0; i < table_.num_shards(); ++i) {
    Shard& s = table_.shard(i);
    std::lock_guard lock(s.mu);
    std::unordered_set<std::string_view> groups_seen;
    for (const auto& [key, meta] : s.objects) {
      if (meta.group_id.empty()) {
        const uint64_t bytes = BytesOnSegment(meta, segment);
        if (bytes == 0 || meta.state != ObjectState::kComplete || meta.hard_pin || meta.demoting ||
            IsLeased(s, meta, now)) {
          continue;
        }
        out.push_back(EvictionCandidate{i, key.str, false, meta.soft_pin, meta.last_access, bytes});
        continue;
      }
      if (!groups_seen.insert(meta.group_id).second) continue;
      auto g = s.groups.find(meta.group_id);
      if (g == s.groups.end() || g->second.lease_deadline > now) continue;
      EvictionCandidate c{i, meta.group_id, true, false, SteadyTime{}, 0};
      bool evictable = true;
      for (const auto& member : g->second.members) {
        auto it = s.objects.find(member);
        if (it == s.objects.end()) continue;
        const ObjectMeta& m = it->second;
        if (m.state != ObjectState::kComplete || m.hard_pin || m.demoting ||
            m.lease_deadline > now) {
          evictable = false;
          break;
        }
        c.soft_pinned = c.soft_pinned || m.soft_pin;
        c.last_access = std::max(c.last_access, m.last_access);
        c.bytes += BytesOnSegment(m, segment);
      }
      if (evictable && c.bytes > 0) out.push_back(std::move(c));
    }
  }
  return out;
}

uint64_t MasterService::EvictCandidate(const EvictionCandidate& c, SegmentId segment,
                                       SteadyTime now) {
  Shard& s = table_.shard(c.shard);
  const std::shared_ptr<TierMover> mover = MoverOf(segment);
  RedirectList redirects;
  uint64_t freed = 0;
  uint64_t objects = 0;
  std::vector<std::pair<DemoteItem, uint64_t>> to_demote;  // (item, put_id)
  {
    std::lock_guard lock(s.mu);
    // Re-check under the lock: a reader may have leased it since collection.
    std::vector<std::string> victims;
    if (!c.is_group) {
      auto it = s.objects.find(c.name);
      if (it == s.objects.end()) return 0;
      const ObjectMeta& m = it->second;
      // Put again into a group since collection: evicting it alone would split the group.
      if (!m.group_id.empty()) return 0;
      if (m.state != ObjectState::kComplete || m.hard_pin || m.demoting || IsLeased(s, m, now)) {
        return 0;
      }
      victims.push_back(c.name);
    } else {
      auto g = s.groups.find(c.name);
      if (g == s.groups.end() || g->second.lease_deadline > now) return 0;
      for (const auto& member : g->second.members) {
        auto it = s.objects.find(member);
        if (it == s.objects.end()) continue;
        const ObjectMeta& m = it->second;
        if (m.state != ObjectState::kComplete || m.hard_pin || m.demoting ||
            m.lease_deadline > now) {
          return 0;
        }
        victims.push_back(member);
      }
    }
    for (const auto& key : victims) {
      auto it = s.objects.find(key);
      ObjectMeta& meta = it->second;
      if (HasDiskReplica(meta)) {
        // Already on disk (written behind, or a replica demoted elsewhere): drop the memory.
        freed += DropMemoryReplicas(meta, segment);
        continue;
      }
      const Replica* mem = MemoryReplicaOn(meta, segment);
      if (mover && mem != nullptr) {
        to_demote.emplace_back(DemoteItem{key, mem->allocation.offset(), meta.size, meta.checksum},
                               meta.put_id);
        continue;
      }
      freed += BytesOnSegment(meta, segment);
      if (!meta.group_id.empty() && table_.ShardOf(key) != c.shard) {
        redirects.emplace_back(key, c.shard);
      }
      table_.EraseLocked(s, it);  // frees the replicas' space (shard -> allocator order)
      ++objects;
    }
    // Keep them (and their memory) as they are while the owner writes them out.
    for (const auto& [item, put_id] : to_demote) s.objects.find(item.key)->second.demoting = true;
  }
  for (const auto& [key, home] : redirects) table_.CleanupRedirect(key, home);
  evicted_objects_.fetch_add(objects, std::memory_order_relaxed);
  evicted_bytes_.fetch_add(freed, std::memory_order_relaxed);
  if (to_demote.empty()) return freed;

  std::vector<DemoteItem> items;
  items.reserve(to_demote.size());
  for (const auto& [item, put_id] : to_demote) items.push_back(item);
  std::vector<Result<DiskLocation>> written = mover->Demote(items);
  written.resize(items.size(), Result<DiskLocation>(ErrorCode::INTERNAL_ERROR,
                                                    "tier mover returned too few results"));
  return freed + FinishDemotion(c.shard, segment, to_demote, written, /*drop_memory=*/true,
                                c.is_group ? c.name : std::string(), now);
}

uint64_t MasterService::FinishDemotion(uint32_t shard, SegmentId segment,
                                       const std::vector<std::pair<DemoteItem, uint64_t>>& items,
                                       std::vector<Result<DiskLocation>>& written, bool drop_memory,
                                       const std::string& group, SteadyTime now) {
  Shard& s = table_.shard(shard);
  RedirectList redirects;
  uint64_t freed = 0;
  uint64_t demoted = 0, demoted_bytes = 0, failed = 0;
  std::vector<ObjectMeta> dropped;  // freed after the lock is released
  {
    std::lock_guard lock(s.mu);
    std::vector<std::string> failed_keys;
    for (size_t k = 0; k < items.size(); ++k) {
      const auto& [item, put_id] = items[k];
      auto it = s.objects.find(item.key);
      // Removed, or removed and put again, while it was written: the record is orphaned, and
      // the memory the mover read can be freed now.
      if (it == s.objects.end() || it->second.put_id != put_id) {
        if (auto parked = s.parked.find(put_id); parked != s.parked.end()) {
          dropped.push_back(std::move(parked->second));
          s.parked.erase(parked);
        }
        continue;
      }
      ObjectMeta& meta = it->second;
      meta.demoting = false;
      if (!written[k].ok()) {
        spdlog::warn("demoting {} to the SSD tier of segment {} failed: {}", item.key, segment,
                     written[k].status().ToString());
        ++failed;
        failed_keys.push_back(item.key);
        continue;
      }
      meta.replicas.push_back(Replica{segment, ReplicaTier::kDisk, Allocation(), *written[k]});
      ++demoted;
      demoted_bytes += meta.size;
      // A reader leased it meanwhile: its memory stays until the next eviction pass.
      if (drop_memory && !IsLeased(s, meta, now)) freed += DropMemoryReplicas(meta, segment);
    }
    if (drop_memory && !failed_keys.empty()) {
      // The space must still be freed: drop what could not be demoted, and with it the
      // rest of its group (all or none of a group stays readable).
      if (!group.empty()) {
        auto g = s.groups.find(group);
        if (g != s.groups.end())
          failed_keys.assign(g->second.members.begin(), g->second.members.end());
      }
      for (const auto& key : failed_keys) {
        auto it = s.objects.find(key);
        if (it == s.objects.end()) continue;
        freed += BytesOnSegment(it->second, segment);
        if (!it->second.group_id.empty() && table_.ShardOf(key) != shard) {
          redirects.emplace_back(key, shard);
        }
        dropped.push_back(table_.EraseLocked(s, it));
      }
    }
  }
  for (const auto& [key, home] : redirects) table_.CleanupRedirect(key, home);
  demoted_objects_.fetch_add(drop_memory ? demoted : 0, std::memory_order_relaxed);
  demoted_bytes_.fetch_add(drop_memory ? demoted_bytes : 0, std::memory_order_relaxed);
  written_behind_.fetch_add(drop_memory ? 0 : demoted, std::memory_order_relaxed);
  demotion_failures_.fetch_add(drop_memory ? dropped.size() : failed, std::memory_order_relaxed);
  return freed;
}

std::vector<Result<PutStartResult>> MasterService::PromoteStart(
    const std::vector<std::string>& keys, uint32_t min_hits) {
  std::vector<Result<PutStartResult>> out;
  out.reserve(keys.size());
  const SteadyTime now = options_.clock->Now();
  for (const auto& key : keys) {
    Result<PutStartResult> r(ErrorCode::OBJECT_NOT_FOUND, key);
    if (Status st = ValidateKey(key); !st.ok()) {
      out.emplace_back(st);
      continue;
    }
    table_.WithObject(key, [&](uint32_t, Shard&, ObjectMeta& meta) {
      const bool disk_only =
          !meta.replicas.empty() &&
          std::all_of(meta.replicas.begin(), meta.replicas.end(),
                      [](const Replica& rep) { return rep.tier == ReplicaTier::kDisk; });
      if (meta.promotion_id != 0) {
        std::lock_guard lock(promotions_mu_);
        if (!promotions_.contains(meta.promotion_id)) meta.promotion_id = 0;  // reclaimed
      }
      if (meta.state != ObjectState::kComplete || !disk_only || meta.promotion_id != 0) {
        r = Result<PutStartResult>(ErrorCode::NO_AVAILABLE_HANDLE, "not a promotion candidate");
        return;
      }
      if (++meta.disk_hits < min_hits) {
        r = Result<PutStartResult>(ErrorCode::NO_AVAILABLE_HANDLE, "below the admission hits");
        return;
      }
      auto seg = segments_.Find(meta.replicas.front().segment);
      auto placed = segments_.Allocate(meta.size, 1, seg ? seg->name : std::string());
      if (!placed.ok()) {
        r = placed.status();
        return;
      }
      PutStartResult res;
      res.put_id = next_put_id_.fetch_add(1, std::memory_order_relaxed);
      Promotion promotion{{}, now};
      for (auto& p : *placed) {
        res.replicas.push_back(
            ReplicaLocation{p.segment, ReplicaTier::kMemory, p.allocation.offset(), meta.size, {}});
        promotion.replicas.push_back(
            Replica{p.segment, ReplicaTier::kMemory, std::move(p.allocation), {}});
      }
      {
        std::lock_guard lock(promotions_mu_);
        promotions_.emplace(res.put_id, std::move(promotion));
      }
      meta.promotion_id = res.put_id;
      r = std::move(res);
    });
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Status> MasterService::PromoteEnd(const std::vector<std::string>& keys,
                                              const std::vector<uint64_t>& promotion_ids,
                                              const std::vector<bool>& ok) {
  std::vector<Status> out;
  out.reserve(keys.size());
  uint64_t promoted = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i >= promotion_ids.size() || i >= ok.size()) {
      out.emplace_back(ErrorCode::INVALID_PARAMS, "promotion_ids/ok shorter than keys");
      continue;
    }
    // Take the range first: whatever happens next, it is either attached or freed here.
    std::optional<Promotion> taken;
    {
      std::lock_guard lock(promotions_mu_);
      auto it = promotions_.find(promotion_ids[i]);
      if (it != promotions_.end()) {
        taken = std::move(it->second);
        promotions_.erase(it);
      }
    }
    Status st(ErrorCode::OBJECT_NOT_FOUND, "no promotion of " + keys[i]);
    table_.WithObject(keys[i], [&](uint32_t, Shard&, ObjectMeta& meta) {
      if (meta.promotion_id != promotion_ids[i]) return;
      meta.promotion_id = 0;
      if (!taken) return;  // reclaimed after put_timeout
      st = Status::Ok();
      if (!ok[i]) return;
      for (auto& rep : taken->replicas) meta.replicas.push_back(std::move(rep));
      meta.disk_hits = 0;
      ++promoted;
    });
    out.push_back(std::move(st));
  }
  promoted_objects_.fetch_add(promoted, std::memory_order_relaxed);
  return out;
}

std::shared_ptr<TierMover> MasterService::MoverOf(SegmentId segment) const {
  std::lock_guard lock(movers_mu_);
  auto it = movers_.find(segment);
  return it == movers_.end() ? nullptr : it->second;
}

void MasterService::DetachTierMover(SegmentId segment, const TierMover* mover) {
  std::lock_guard lock(movers_mu_);
  auto it = movers_.find(segment);
  if (it != movers_.end() && it->second.get() == mover) movers_.erase(it);
}

void MasterService::SetTierMover(SegmentId segment, std::shared_ptr<TierMover> mover) {
  std::lock_guard lock(movers_mu_);
  if (mover) {
    movers_[segment] = std::move(mover);
  } else {
    movers_.erase(segment);
  }
}

uint64_t MasterService::DropDiskReplicas(SegmentId segment, uint32_t region, uint64_t generation,
                                         const std::vector<std::string>& keys) {
  uint64_t removed = 0;
  uint64_t dropped_replicas = 0;
  for (const auto& key : keys) {
    RedirectList redirects;
    std::vector<ObjectMeta> dropped;
    table_.WithObject(key, [&](uint32_t idx, Shard& s, ObjectMeta& meta) {
      const size_t before = meta.replicas.size();
      std::erase_if(meta.replicas, [&](const Replica& r) {
        return r.tier == ReplicaTier::kDisk && r.segment == segment && r.disk.region == region &&
               r.disk.generation == generation;
      });
      dropped_replicas += before - meta.replicas.size();
      if (!meta.replicas.empty()) return;
      // Gone from every tier: remove it, and the rest of its group (no partial groups).
      std::vector<std::string> victims{key};
      if (!meta.group_id.empty()) {
        auto g = s.groups.find(meta.group_id);
        if (g != s.groups.end()) victims.assign(g->second.members.begin(), g->second.members.end());
      }
      for (const auto& v : victims) {
        auto it = s.objects.find(v);
        if (it == s.objects.end()) continue;
        if (!it->second.group_id.empty() && table_.ShardOf(v) != idx)
          redirects.emplace_back(v, idx);
        dropped.push_back(table_.EraseLocked(s, it));
      }
    });
    removed += dropped.size();
    dropped.clear();
    for (const auto& [k, home] : redirects) table_.CleanupRedirect(k, home);
  }
  disk_replicas_dropped_.fetch_add(dropped_replicas, std::memory_order_relaxed);
  return removed;
}

std::vector<Status> MasterService::AddDiskReplicas(SegmentId segment,
                                                   const std::vector<DiskRecord>& records) {
  std::vector<Status> out;
  out.reserve(records.size());
  if (!segments_.Find(segment)) {
    return std::vector<Status>(records.size(),
                               Status(ErrorCode::SEGMENT_NOT_FOUND,
                                      "segment " + std::to_string(segment) + " is not mounted"));
  }
  const SteadyTime now = options_.clock->Now();
  for (const auto& rec : records) {
    if (Status st = ValidateKey(rec.key); !st.ok()) {
      out.push_back(st);
      continue;
    }
    if (rec.location.size == 0) {
      out.emplace_back(ErrorCode::INVALID_PARAMS, "disk record of " + rec.key + " is empty");
      continue;
    }
    const uint32_t a = table_.ShardOf(rec.key);
    Shard& ks = table_.shard(a);
    bool redirected = false;
    {
      std::lock_guard lock(ks.mu);
      redirected = ks.redirects.contains(rec.key);
      if (!redirected && !ks.objects.contains(rec.key)) {
        ObjectMeta meta;
        meta.size = rec.location.size;
        meta.checksum = rec.checksum;
        meta.put_id = next_put_id_.fetch_add(1, std::memory_order_relaxed);
        meta.state = ObjectState::kComplete;
        meta.put_started = now;
        meta.last_access = now;
        meta.replicas.push_back(Replica{segment, ReplicaTier::kDisk, Allocation(), rec.location});
        ks.objects.emplace(StoredKey(rec.key), std::move(meta));
        out.push_back(Status::Ok());
        continue;
      }
    }
    // A grouped object of this key may live elsewhere (or the redirect is stale): keep the
    // stored one either way; warm restart never overrides what the pool already holds.
    out.emplace_back(ErrorCode::OBJECT_ALREADY_EXISTS, rec.key + " is already stored");
  }
  return out;
}

std::vector<Status> MasterService::CopyToDisk(const std::vector<std::string>& keys,
                                              const std::function<bool(SegmentId)>& only) {
  std::vector<Status> out(keys.size(), Status(ErrorCode::OBJECT_NOT_FOUND, "not stored"));
  struct Job {
    size_t index;
    uint32_t shard;
    DemoteItem item;
    uint64_t put_id;
  };
  std::map<SegmentId, std::pair<std::shared_ptr<TierMover>, std::vector<Job>>> by_segment;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (Status st = ValidateKey(keys[i]); !st.ok()) {
      out[i] = st;
      continue;
    }
    table_.WithObject(keys[i], [&](uint32_t idx, Shard&, ObjectMeta& meta) {
      if (meta.state != ObjectState::kComplete) {
        out[i] = Status(ErrorCode::REPLICA_IS_NOT_READY, "put of " + keys[i] + " has not ended");
        return;
      }
      out[i] = Status::Ok();
      if (meta.demoting || HasDiskReplica(meta)) return;
      bool elsewhere = false;  // on segments `only` leaves out
      for (const auto& r : meta.replicas) {
        if (r.tier != ReplicaTier::kMemory) continue;
        if (only && !only(r.segment)) {
          elsewhere = true;
          continue;
        }
        auto mover = MoverOf(r.segment);
        if (!mover) continue;
        auto& slot = by_segment[r.segment];
        slot.first = std::move(mover);
        slot.second.push_back(
            Job{i, idx, DemoteItem{keys[i], r.allocation.offset(), meta.size, meta.checksum},
                meta.put_id});
        meta.demoting = true;
        return;
      }
      if (elsewhere) return;  // OK: not this copy's to make
      out[i] = Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                      keys[i] + " has no memory replica on a segment with an SSD tier");
    });
  }
  const SteadyTime now = options_.clock->Now();
  for (auto& [segment, slot] : by_segment) {
    auto& [mover, jobs] = slot;
    std::vector<DemoteItem> items;
    for (const auto& j : jobs) items.push_back(j.item);
    std::vector<Result<DiskLocation>> written = mover->Demote(items);
    written.resize(items.size(), Result<DiskLocation>(ErrorCode::INTERNAL_ERROR,
                                                      "tier mover returned too few results"));
    for (size_t k = 0; k < jobs.size(); ++k) {
      std::vector<Result<DiskLocation>> one{written[k]};
      FinishDemotion(jobs[k].shard, segment, {{jobs[k].item, jobs[k].put_id}}, one,
                     /*drop_memory=*/false, std::string(), now);
      if (!written[k].ok()) out[jobs[k].index] = written[k].status();
    }
  }
  return out;
}

uint64_t MasterService::EvictFromSegment(SegmentId segment, uint64_t target_bytes) {
  const SteadyTime now = options_.clock->Now();
  auto candidates = CollectCandidates(segment, now);
  policy_->Order(candidates);
  uint64_t freed = 0;
  for (const auto& c : candidates) {
    if (freed >= target_bytes) break;
    freed += EvictCandidate(c, segment, now);
  }
  if (freed < target_bytes) {
    spdlog::debug("eviction on segment {} freed {} of {} bytes (rest leased or pinned)", segment,
                  freed, target_bytes);
  }
  return freed;
}

MasterStats MasterService::Stats() {
  MasterStats st;
  for (uint32_t i = 0; i < table_.num_shards(); ++i) {
    Shard& s = table_.shard(i);
    std::lock_guard lock(s.mu);
    st.objects += s.objects.size();
    st.groups += s.groups.size();
    for (const auto& [key, meta] : s.objects) {
      if (meta.state == ObjectState::kPending) ++st.pending_objects;
      for (const auto& r : meta.replicas) {
        ++(r.tier == ReplicaTier::kMemory ? st.memory_replicas : st.disk_replicas);
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
  return st;
}

}  // namespace tierkv
