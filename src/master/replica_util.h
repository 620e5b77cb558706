// Small queries and edits of an ObjectMeta's replica list, shared by the files of
// MasterService (master_service.cc, master_eviction.cc, master_tiering.cc). Callers hold the
// object's shard lock. Not part of any interface: private to src/master/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "master/object_table.h"

namespace tierkv {

// (key, home shard) pairs whose redirect may need cleaning once locks are gone.
using RedirectList = std::vector<std::pair<std::string, uint32_t>>;

// Memory bytes `meta` holds on `segment` (disk replicas hold none).
inline uint64_t BytesOnSegment(const ObjectMeta& meta, SegmentId segment) {
  uint64_t bytes = 0;
  for (const auto& r : meta.replicas) {
    if (r.segment == segment && r.tier == ReplicaTier::kMemory) bytes += r.allocation.size();
  }
  return bytes;
}

inline bool HasDiskReplica(const ObjectMeta& meta) {
  return std::any_of(meta.replicas.begin(), meta.replicas.end(),
                     [](const Replica& r) { return r.tier == ReplicaTier::kDisk; });
}

inline const Replica* MemoryReplicaOn(const ObjectMeta& meta, SegmentId segment) {
  for (const auto& r : meta.replicas) {
    if (r.segment == segment && r.tier == ReplicaTier::kMemory) return &r;
  }
  return nullptr;
}

// Keeps `replicas` (a version an upsert replaced) allocated in `shard` until `free_after`, or
// hands them to `drop` (freed by the caller once the shard lock is released) when no lease on
// them is left. MasterService::ReclaimAbandonedPuts frees retired versions later.
inline void Retire(Shard& shard, ReplicaList replicas, SteadyTime free_after, SteadyTime now,
                   std::vector<ReplicaList>& drop) {
  if (replicas.empty()) return;
  if (free_after <= now) {
    drop.push_back(std::move(replicas));
  } else {
    shard.retired.push_back(RetiredVersion{std::move(replicas), free_after});
  }
}

// Frees `meta`'s memory replicas on `segment`; returns the bytes freed.
inline uint64_t DropMemoryReplicas(ObjectMeta& meta, SegmentId segment) {
  const uint64_t bytes = BytesOnSegment(meta, segment);
  EraseReplicasIf(meta.replicas, [segment](const Replica& r) {
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
      if (!it->second.group_id().empty() && table.ShardOf(it->first.view()) != i) {
        redirects.emplace_back(it->first.view(), i);
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

}  // namespace tierkv
