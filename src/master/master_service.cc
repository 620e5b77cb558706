#include "master/master_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_set>

#include "common/key.h"

namespace tierkv {
namespace {

constexpr uint32_t kNoShard = UINT32_MAX;
constexpr int kMaxEvictionRounds = 16;

// (key, home shard) pairs whose redirect may need cleaning once locks are gone.
using RedirectList = std::vector<std::pair<std::string, uint32_t>>;

uint64_t BytesOnSegment(const ObjectMeta& meta, SegmentId segment) {
  uint64_t bytes = 0;
  for (const auto& r : meta.replicas) {
    if (r.segment == segment) bytes += r.allocation.size();
  }
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
      table_(options_.shards) {}

MasterService::~MasterService() = default;

Result<SegmentId> MasterService::MountSegment(const std::string& name, uint64_t capacity) {
  return segments_.Mount(name, capacity);
}

Status MasterService::UnmountSegment(SegmentId id) {
  if (Status st = segments_.Unmount(id); !st.ok()) return st;
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
    const bool px = x.name == config.preferred_segment;
    const bool py = y.name == config.preferred_segment;
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
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i >= put_ids.size() || i >= checksums.size()) {
      out.emplace_back(ErrorCode::INVALID_PARAMS, "put_ids/checksums shorter than keys");
      continue;
    }
    out.push_back(EndPut(keys[i], put_ids[i], checksums[i], EndKind::kEnd));
  }
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
        for (const auto& replica : meta.replicas) {
          rep.replicas.push_back(ReplicaLocation{replica.segment, replica.tier,
                                                 replica.allocation.offset(), meta.size});
        }
        out[i] = std::move(rep);
      },
      [](size_t) {});
  lease_grants_.fetch_add(grants, std::memory_order_relaxed);
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
  return result;
}

uint64_t MasterService::RemoveAll(bool force) {
  const SteadyTime now = options_.clock->Now();
  return EraseWhere(table_, [&](Shard& s, const StoredKey&, const ObjectMeta& meta) {
    return meta.state == ObjectState::kComplete && (force || !IsLeased(s, meta, now));
  });
}

uint64_t MasterService::ReclaimAbandonedPuts() {
  const SteadyTime now = options_.clock->Now();
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
        if (bytes == 0 || meta.state != ObjectState::kComplete || meta.hard_pin ||
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
        if (m.state != ObjectState::kComplete || m.hard_pin || m.lease_deadline > now) {
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
  RedirectList redirects;
  uint64_t freed = 0;
  uint64_t objects = 0;
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
      if (m.state != ObjectState::kComplete || m.hard_pin || IsLeased(s, m, now)) return 0;
      victims.push_back(c.name);
    } else {
      auto g = s.groups.find(c.name);
      if (g == s.groups.end() || g->second.lease_deadline > now) return 0;
      for (const auto& member : g->second.members) {
        auto it = s.objects.find(member);
        if (it == s.objects.end()) continue;
        const ObjectMeta& m = it->second;
        if (m.state != ObjectState::kComplete || m.hard_pin || m.lease_deadline > now) return 0;
        victims.push_back(member);
      }
    }
    for (const auto& key : victims) {
      auto it = s.objects.find(key);
      freed += BytesOnSegment(it->second, segment);
      if (!it->second.group_id.empty() && table_.ShardOf(key) != c.shard) {
        redirects.emplace_back(key, c.shard);
      }
      table_.EraseLocked(s, it);  // frees the replicas' space (shard -> allocator order)
      ++objects;
    }
  }
  for (const auto& [key, home] : redirects) table_.CleanupRedirect(key, home);
  evicted_objects_.fetch_add(objects, std::memory_order_relaxed);
  evicted_bytes_.fetch_add(freed, std::memory_order_relaxed);
  return freed;
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
    }
  }
  st.evicted_objects = evicted_objects_.load();
  st.evicted_bytes = evicted_bytes_.load();
  st.reclaimed_puts = reclaimed_puts_.load();
  st.lease_grants = lease_grants_.load();
  return st;
}

}  // namespace tierkv
