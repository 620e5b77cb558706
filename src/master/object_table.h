// The master's object table: object metadata sharded by hash.
//
// An object lives in its *home shard*: hash(group id) when it has a group, else
// hash(key). Co-locating a group makes whole-group leases and all-or-none
// eviction single-lock operations. A grouped key whose home differs from its
// *key shard* (hash(key)) leaves a redirect there, so lookups by key alone find
// it. Redirects may go stale after the object is gone; every reader re-checks
// the home shard, and writers clean stale redirects under both locks.
//
// Lock order (see docs/architecture.md): shard locks in ascending index, then
// SegmentRegistry::mu_, then OffsetAllocator::mu_. Never take a shard lock while
// holding a registry or allocator lock.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "master/object_key.h"
#include "master/object_map.h"
#include "master/object_meta.h"
#include "master/segment_index_types.h"
#include "master/segment_registry.h"

namespace tierkv {

// The store-index entry of an object (what a store keeps to be recovered from), without its
// replica's place (offset or disk location: the caller adds it).
IndexEntry IndexEntryOf(std::string_view key, const ObjectMeta& meta);

// The replicas of a version an upsert replaced while readers held a lease on it: kept
// allocated until the lease ends (readers finish reading the old bytes), then freed by
// MasterService::ReclaimAbandonedPuts.
struct RetiredVersion {
  ReplicaList replicas;
  SteadyTime free_after{};
};

// The replicas of an object removed or replaced while a tier move read them (Shard::parked),
// and the end of the last lease on them.
struct ParkedVersion {
  ReplicaList replicas;
  SteadyTime lease_deadline{};
};

struct GroupMeta {
  std::unordered_set<std::string, KeyHash, KeyEq> members;
  SteadyTime lease_deadline{};
};

// Open addressing (absl's SwissTable): a lookup touches one control group and
// one slot, both prefetchable, instead of a chain of nodes.
template <typename V>
using KeyMap = absl::flat_hash_map<std::string, V, KeyHash, KeyEq>;

// A shard index that names no shard ("not found", "none seen yet").
inline constexpr uint32_t kNoShard = UINT32_MAX;

struct Shard {
  std::mutex mu;
  ObjectMap objects;           // guarded by mu
  KeyMap<GroupMeta> groups;    // groups homed here, guarded by mu
  KeyMap<uint32_t> redirects;  // key -> home shard, for grouped keys, guarded by mu
  // Objects removed while a tier move was reading their memory, by put id: they keep their
  // ranges allocated (so no new put is written there under the mover's reads) until the move
  // finishes (MasterService::FinishDemotion). Guarded by mu.
  std::unordered_map<uint64_t, ParkedVersion> parked;
  std::vector<RetiredVersion> retired;  // guarded by mu
  // Keys stored here that began a put or an upsert since maintenance last looked at them
  // (their put may have ended since; a key may be listed twice): what
  // MasterService::ReclaimAbandonedPuts visits, instead of every object. Guarded by mu.
  std::vector<std::string> pending_keys;
  // When pending_keys reaches this size, NotePending drops the keys whose put ended (so a
  // master whose maintenance does not run, or runs late, keeps it bounded). Guarded by mu.
  size_t pending_compact_at = 1024;
  // Where the next eviction window starts (the number of the entry after the last one
  // visited; 0 = the beginning): MasterService::CollectCandidates. Guarded by mu.
  uint32_t eviction_cursor = 0;
};

class ObjectTable {
 public:
  // `lease_ttl`: the master's, for the lease of a parked object (EraseLocked).
  explicit ObjectTable(uint32_t num_shards, SteadyTime::duration lease_ttl = {});

  uint32_t num_shards() const { return static_cast<uint32_t>(shards_.size()); }
  Shard& shard(uint32_t index) { return *shards_[index]; }
  uint32_t ShardOf(std::string_view key_or_group) const {
    return ShardOfHash(HashKey(key_or_group));
  }
  uint32_t ShardOfHash(uint64_t hash) const {
    // The hash's 16 high bits pick the shard (up to 4,096 of them); the tables probe with the
    // low ones.
    return static_cast<uint32_t>((hash >> (kKeyHashBits - 16)) % shards_.size());
  }
  uint32_t HomeShard(std::string_view key, std::string_view group) const {
    return ShardOf(group.empty() ? key : group);
  }

  // Locks the given shards (duplicates allowed) in ascending order.
  std::vector<std::unique_lock<std::mutex>> LockShards(std::vector<uint32_t> indices);

  // Calls fn(home_shard_index, shard, meta) under the home shard's lock if the
  // key exists; returns whether it did. fn must not take other shard locks.
  template <typename Fn>
  bool WithObject(std::string_view key, Fn&& fn);

  // Batch lookup: calls fn(i, shard_index, shard, meta) for every i with
  // !skip[i] whose key exists, under its home shard's lock, and
  // missing(i) for the rest. Keys are grouped by shard (one lock per shard)
  // and probed with prefetching, so a batch overlaps its cache misses.
  // Keys: any random-access container of strings or string_views. `reads`: how much of each
  // entry fn reads (what the pipeline prefetches).
  template <typename Keys, typename Fn, typename Missing>
  void ForEachKey(const Keys& keys, const std::vector<bool>& skip, Fn&& fn, Missing&& missing,
                  ObjectMap::EntryReads reads = ObjectMap::EntryReads::kReplicas);

  // Erases `key` from `shard` (which the caller has locked) and its group
  // membership; returns the ObjectMeta so the caller can drop it (freeing its
  // space) after deciding what else to clean up.
  // An object that is `demoting` is parked in shard.parked instead (its replicas stay
  // allocated) and an empty ObjectMeta is returned.
  ObjectMeta EraseLocked(Shard& shard, ObjectMap::iterator it);

  // Removes the redirect of `key` if it points to `home` and the object is no
  // longer there. Takes both shard locks; call with no shard lock held.
  void CleanupRedirect(const std::string& key, uint32_t home);

 private:
  std::vector<std::unique_ptr<Shard>> shards_;
  const SteadyTime::duration lease_ttl_;
};

template <typename Fn>
bool ObjectTable::WithObject(std::string_view key, Fn&& fn) {
  const uint32_t a = ShardOf(key);
  uint32_t home = a;
  {
    Shard& s = *shards_[a];
    std::lock_guard lock(s.mu);
    auto it = s.objects.find(key);
    if (it != s.objects.end()) {
      fn(a, s, it->second);
      return true;
    }
    auto r = s.redirects.find(key);
    if (r == s.redirects.end()) return false;
    home = r->second;
  }
  Shard& h = *shards_[home];
  std::lock_guard lock(h.mu);
  auto it = h.objects.find(key);
  if (it == h.objects.end()) return false;
  fn(home, h, it->second);
  return true;
}

template <typename Keys, typename Fn, typename Missing>
void ObjectTable::ForEachKey(const Keys& keys, const std::vector<bool>& skip, Fn&& fn,
                             Missing&& missing, ObjectMap::EntryReads reads) {
  const size_t n = keys.size();
  const uint32_t num = num_shards();
  std::vector<uint64_t> hashes(n);
  std::vector<uint32_t> count(num + 1, 0);
  for (size_t i = 0; i < n; ++i) {
    if (skip[i]) continue;
    hashes[i] = HashKey(keys[i]);
    ++count[ShardOfHash(hashes[i]) + 1];
  }
  for (uint32_t s = 0; s < num; ++s) count[s + 1] += count[s];
  std::vector<uint32_t> order(count[num]);
  {
    std::vector<uint32_t> pos(count.begin(), count.end() - 1);
    for (size_t i = 0; i < n; ++i) {
      if (!skip[i]) order[pos[ShardOfHash(hashes[i])]++] = static_cast<uint32_t>(i);
    }
  }
  std::vector<std::pair<size_t, uint32_t>> redirected;  // (key index, home shard)
  // Four-stage pipeline per shard, one key per stage per step so that the misses in flight stay
  // even (bursts of prefetches stall once the core's miss buffers are full): at key j, prefetch
  // the index's control bytes and slot group for key j+3D; from them, the entry key j+2D most
  // likely names (its hash, key address and the metadata fn reads); for key j+D, find its
  // entry by hash (now in cache) and prefetch its key bytes; then look up key j with
  // everything in cache.
  constexpr uint32_t kDistance = 8;
  for (uint32_t s = 0; s < num; ++s) {
    const uint32_t begin = count[s], end = count[s + 1];
    if (begin == end) continue;
    Shard& sh = *shards_[s];
    std::lock_guard lock(sh.mu);
    for (uint32_t j = begin; j < std::min(end, begin + 3 * kDistance); ++j) {
      sh.objects.PrefetchIndex(hashes[order[j]]);
    }
    for (uint32_t j = begin; j < std::min(end, begin + 2 * kDistance); ++j) {
      sh.objects.PrefetchEntry(hashes[order[j]], reads);
    }
    for (uint32_t j = begin; j < std::min(end, begin + kDistance); ++j) {
      sh.objects.PrefetchKey(hashes[order[j]]);
    }
    for (uint32_t j = begin; j < end; ++j) {
      if (j + 3 * kDistance < end) sh.objects.PrefetchIndex(hashes[order[j + 3 * kDistance]]);
      if (j + 2 * kDistance < end)
        sh.objects.PrefetchEntry(hashes[order[j + 2 * kDistance]], reads);
      if (j + kDistance < end) sh.objects.PrefetchKey(hashes[order[j + kDistance]]);
      const size_t i = order[j];
      const HashedKey hk{keys[i], hashes[i]};
      auto it = sh.objects.find(hk);
      if (it != sh.objects.end()) {
        fn(i, s, sh, it->second);
        continue;
      }
      auto r = sh.redirects.find(hk);
      if (r != sh.redirects.end()) {
        redirected.emplace_back(i, r->second);
      } else {
        missing(i);
      }
    }
  }
  for (const auto& [i, home] : redirected) {
    Shard& h = *shards_[home];
    std::lock_guard lock(h.mu);
    auto it = h.objects.find(HashedKey{keys[i], hashes[i]});
    if (it != h.objects.end()) {
      fn(i, home, h, it->second);
    } else {
      missing(i);
    }
  }
}

}  // namespace tierkv
