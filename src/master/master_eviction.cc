// MasterService, part 2: watermark eviction and demotion to SSD tiers (the put path's
// eviction too). Part 1 (segments, puts, reads, removal) is master_service.cc; part 3 (promotion,
// write-behind, disk-replica bookkeeping) is master_tiering.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>
#include <unordered_set>

#include "common/key.h"
#include "master/master_service.h"
#include "master/replica_util.h"

namespace tierkv {

uint64_t MasterService::EvictForPut(uint64_t size, const ReplicateConfig& config,
                                    std::string_view tenant) {
  const std::string pool = segments_.PlacementPool(tenant);
  auto usage = segments_.Usage();
  std::sort(usage.begin(), usage.end(), [&](const SegmentUsage& x, const SegmentUsage& y) {
    const bool px = IsPreferred(x.name, config.preferred_segment);
    const bool py = IsPreferred(y.name, config.preferred_segment);
    if (px != py) return px;
    return x.capacity - x.used > y.capacity - y.used;
  });
  uint64_t freed = 0;
  size_t taken = 0;
  for (size_t i = 0; i < usage.size() && taken < config.replica_num; ++i) {
    // Placement skips a held segment (its index not linked yet: restart recovery), so evicting
    // there frees nothing this put could use — and would walk the whole table for nothing on
    // every put refused while the stores report.
    auto seg = segments_.Find(usage[i].id);
    if (!seg || seg->held.load() || seg->options.tenant != pool) continue;
    ++taken;
    const auto target = size + static_cast<uint64_t>(options_.eviction_ratio *
                                                     static_cast<double>(usage[i].capacity));
    freed += EvictFromSegment(usage[i].id, target);
  }
  return freed;
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

std::vector<EvictionCandidate> MasterService::CollectCandidates(SegmentId segment, SteadyTime now,
                                                                uint64_t want_bytes,
                                                                bool* sampled) {
  std::vector<EvictionCandidate> out;
  if (sampled != nullptr) *sampled = false;
  const uint64_t want_per_shard =
      want_bytes == 0 ? 0 : kEvictionOversample * want_bytes / table_.num_shards() + 1;
  for (uint32_t i = 0; i < table_.num_shards(); ++i) {
    Shard& s = table_.shard(i);
    std::lock_guard lock(s.mu);
    std::unordered_set<std::string_view> groups_seen;
    uint64_t found = 0;
    auto visit = [&](const StoredKey& key, const ObjectMeta& meta) {
      if (meta.group_id().empty()) {
        const uint64_t bytes = BytesOnSegment(meta, segment);
        if (bytes == 0 || meta.state != ObjectState::kComplete || meta.hard_pin || meta.demoting ||
            meta.next() || IsLeased(s, meta, now)) {
          return;
        }
        out.push_back(EvictionCandidate{
            i, std::string(key.view()), false, SoftPinned(meta, now), meta.last_access, bytes,
            static_cast<uint8_t>(ReuseClass(meta.reuse_references, meta.reuse_tail))});
        found += bytes;
        return;
      }
      if (!groups_seen.insert(meta.group_id()).second) return;
      auto g = s.groups.find(meta.group_id());
      if (g == s.groups.end() || g->second.lease_deadline > now) return;
      EvictionCandidate c{i, meta.group_id(), true, false, SteadyTime{}, 0, 0};
      uint32_t most_references = 0;
      for (const auto& member : g->second.members) {
        auto it = s.objects.find(member);
        if (it == s.objects.end()) continue;
        const ObjectMeta& m = it->second;
        if (m.state != ObjectState::kComplete || m.hard_pin || m.demoting || m.next() ||
            OwnLeaseDeadline(m) > now) {
          return;
        }
        c.soft_pinned = c.soft_pinned || SoftPinned(m, now);
        c.last_access = std::max(c.last_access, m.last_access);
        c.bytes += BytesOnSegment(m, segment);
        // A group is as valuable as its most referenced member (a non-tail on a tie).
        if (m.reuse_references > most_references ||
            (m.reuse_references == most_references && !m.reuse_tail)) {
          most_references = m.reuse_references;
          c.reuse_class = static_cast<uint8_t>(ReuseClass(m.reuse_references, m.reuse_tail));
        }
      }
      if (c.bytes > 0) {
        found += c.bytes;
        out.push_back(std::move(c));
      }
    };
    if (want_bytes == 0 || s.objects.size() <= kExactEvictionShardObjects) {
      for (const auto& [key, meta] : s.objects) visit(key, meta);
      continue;
    }
    // A window of the shard, from where the last one stopped (a clock hand over the shard's
    // entries): enough candidates for this shard's share of the target, oversampled so that the
    // policy still chooses among them, and at most the shard once around.
    if (sampled != nullptr) *sampled = true;
    auto it = s.objects.from(s.eviction_cursor);
    if (it == s.objects.end()) it = s.objects.begin();
    for (size_t seen = 0; seen < s.objects.size() && found < want_per_shard; ++seen) {
      if (it == s.objects.end()) it = s.objects.begin();
      visit(it->first, it->second);
      ++it;
    }
    s.eviction_cursor = it == s.objects.end() ? 0 : it.number();
  }
  return out;
}

uint64_t MasterService::EvictCandidate(const EvictionCandidate& c, SegmentId segment,
                                       SteadyTime now) {
  Shard& s = table_.shard(c.shard);
  const std::shared_ptr<TierMover> mover = MoverOf(segment);
  // The owner has an SSD tier but its stream is down (a master restart, a broken stream):
  // what would be demoted stays in memory until the stream is back, rather than being dropped.
  bool defer = false;
  if (!mover) {
    auto seg = segments_.Find(segment);
    defer = seg && seg->options.has_tier;
  }
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
      if (!m.group_id().empty()) return 0;
      if (m.state != ObjectState::kComplete || m.hard_pin || m.demoting || m.next() ||
          IsLeased(s, m, now)) {
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
        if (m.state != ObjectState::kComplete || m.hard_pin || m.demoting || m.next() ||
            OwnLeaseDeadline(m) > now) {
          return 0;
        }
        victims.push_back(member);
      }
    }
    if (defer) {
      for (const auto& key : victims) {
        const ObjectMeta& m = s.objects.find(key)->second;
        if (!HasDiskReplica(m) && MemoryReplicaOn(m, segment) != nullptr) return 0;
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
      if (!meta.group_id().empty() && table_.ShardOf(key) != c.shard) {
        redirects.emplace_back(key, c.shard);
      }
      if (reuse_) reuse_->OnEvict(c.shard, it->first.hash(), meta, s.objects.size());
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
  std::vector<ReplicaList> retired_now;
  {
    std::lock_guard lock(s.mu);
    std::vector<std::string> failed_keys;
    for (size_t k = 0; k < items.size(); ++k) {
      const auto& [item, put_id] = items[k];
      auto it = s.objects.find(item.key);
      // Removed, or removed and put again, or replaced by an upsert, while it was written: the
      // record is orphaned, and the memory the mover read can go once no reader holds a lease
      // on it.
      if (it == s.objects.end() || it->second.put_id != put_id) {
        if (auto parked = s.parked.find(put_id); parked != s.parked.end()) {
          Retire(s, std::move(parked->second.replicas), parked->second.lease_deadline, now,
                 retired_now);
          s.parked.erase(parked);
        }
        continue;
      }
      ObjectMeta& meta = it->second;
      meta.demoting = false;
      if (written[k].ok() && !DiskLocationFits(*written[k])) {
        // A tier (a store's, over the wire) that answered a record off a 4 KiB page.
        written[k] = Status(ErrorCode::INTERNAL_ERROR, "the tier answered a record at offset " +
                                                           std::to_string(written[k]->offset) +
                                                           ", not on a 4 KiB page");
      }
      if (!written[k].ok()) {
        spdlog::warn("demoting {} to the SSD tier of segment {} failed: {}", item.key, segment,
                     written[k].status().ToString());
        ++failed;
        failed_keys.push_back(item.key);
        continue;
      }
      meta.replicas.push_back(MakeDiskReplica(segment, item.key, meta, *written[k]));
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
        if (!it->second.group_id().empty() && table_.ShardOf(key) != shard) {
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

uint64_t MasterService::EvictFromSegment(SegmentId segment, uint64_t target_bytes) {
  const SteadyTime now = options_.clock->Now();
  uint64_t freed = 0;
  // A window of the table first (no full walk of a large table per round); if its candidates
  // fall short (leased, pinned, other segments' objects), the whole table.
  for (const bool window : {true, false}) {
    bool sampled = false;
    auto candidates = CollectCandidates(segment, now, window ? target_bytes - freed : 0, &sampled);
    if (reuse_) {
      policy_->OrderWithReuse(candidates, reuse_->Totals(), now);
    } else {
      policy_->Order(candidates);
    }
    for (const auto& c : candidates) {
      if (freed >= target_bytes) break;
      freed += EvictCandidate(c, segment, now);
    }
    // A first pass that walked every shard whole already saw the whole table.
    if (freed >= target_bytes || (window && !sampled)) break;
  }
  if (freed < target_bytes) {
    spdlog::debug("eviction on segment {} freed {} of {} bytes (rest leased or pinned)", segment,
                  freed, target_bytes);
  }
  return freed;
}

}  // namespace tierkv
