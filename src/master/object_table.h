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
#include "common/disk_location.h"
#include "master/segment_index_types.h"
#include "master/segment_registry.h"
#include "tierkv/types.h"

namespace tierkv {

uint64_t HashKey(std::string_view key);

// A key with its hash computed once: batch lookups pick the shard and probe the
// table with the same hash.
struct HashedKey {
  std::string_view key;
  uint64_t hash;
};

// The key of the object map: the key with its hash, so probes compare hashes
// before touching the key's bytes (a cache miss for long keys).
struct StoredKey {
  explicit StoredKey(std::string s) : hash(HashKey(s)), str(std::move(s)) {}
  // `h` must be HashKey(s) (computed once by a caller that probed with it).
  StoredKey(std::string s, uint64_t h) : hash(h), str(std::move(s)) {}
  uint64_t hash;
  std::string str;
};

// Matches any stored key with this hash. Only for prefetching: it lets a batch
// find the slot of a future key without reading that key's bytes.
struct HashOnly {
  uint64_t hash;
};

// Matches the first slot whose control byte fits this hash, without reading the slot. Only
// for prefetching: it names the slot a future key most likely sits in while only the control
// bytes are in cache (a miss on a hash compare would stall the pipeline).
struct SlotProbe {
  uint64_t hash;
};

// Hash of keys and group ids: xxh3 (fast for ~100-byte KV keys), transparent
// so lookups by string_view or HashedKey don't allocate or rehash.
struct KeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return HashKey(s); }
  size_t operator()(const HashedKey& k) const { return k.hash; }
  size_t operator()(const StoredKey& k) const { return k.hash; }
  size_t operator()(HashOnly k) const { return k.hash; }
  size_t operator()(SlotProbe k) const { return k.hash; }
};
struct KeyEq {
  using is_transparent = void;
  bool operator()(const StoredKey& a, const StoredKey& b) const {
    return a.hash == b.hash && a.str == b.str;
  }
  bool operator()(const HashedKey& a, const StoredKey& b) const {
    return a.hash == b.hash && a.key == b.str;
  }
  bool operator()(HashOnly a, const StoredKey& b) const { return a.hash == b.hash; }
  bool operator()(SlotProbe, const StoredKey&) const { return true; }
  bool operator()(std::string_view a, const StoredKey& b) const { return a == b.str; }
  // Maps keyed by plain strings (groups, redirects).
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
  bool operator()(const HashedKey& a, std::string_view b) const { return a.key == b; }
  bool operator()(std::string_view a, const HashedKey& b) const { return a == b.key; }
  // absl may pass the stored key first.
  template <typename T>
  bool operator()(const StoredKey& a, const T& b) const {
    return (*this)(b, a);
  }
};

enum class ObjectState : uint8_t { kPending, kComplete };

// A memory replica owns its allocation in the segment; a disk replica names a record in the
// SSD tier of the segment's owner (and has no allocation). On a segment whose owner keeps an
// index, a disk replica also holds a claim that tells the owner when the replica is dropped.
struct Replica {
  SegmentId segment;
  ReplicaTier tier;
  Allocation allocation;
  DiskLocation disk{};
  std::unique_ptr<DiskClaim> claim{};
};

// The next version of an object an upsert is writing (MasterService::UpsertStart): invisible to
// readers until its PutEnd swaps it in.
struct PendingVersion {
  uint64_t size = 0;
  uint64_t put_id = 0;
  bool soft_pin = false;
  SteadyTime soft_pin_until{};  // SteadyTime{}: the pin does not lapse
  bool hard_pin = false;
  std::vector<Replica> replicas;  // memory replicas only
  SteadyTime put_started{};
};

// Field order matters: the map's slot holds the key and this struct, and a lookup (exists,
// lease, get) reads only the fields up to `replicas`, which sit next to the key so that it
// touches two or three of the slot's cache lines instead of four or five.
struct ObjectMeta {
  ObjectState state = ObjectState::kPending;
  bool soft_pin = false;
  bool hard_pin = false;
  bool demoting = false;  // a tier move is writing it to disk: not evicted again meanwhile
  // A pending put an upsert started for a key it did not find: its PutEnd is confirmed by every
  // store's index (MasterService::EndPut).
  bool confirm_all = false;
  // Kept for eviction policies that learn reuse (ReuseTracker, src/master/reuse_policy.h): how
  // often the object was referenced, whether it is a tail chunk, and until when further
  // references count as the last one.
  bool reuse_tail = false;
  uint32_t reuse_references = 0;
  SteadyTime reuse_until{};
  // When soft_pin lapses (SteadyTime{}: never; SoftPinned below reads both).
  SteadyTime soft_pin_until{};
  SteadyTime lease_deadline{};  // ungrouped objects; groups lease in GroupMeta
  SteadyTime last_access{};
  std::string group_id;
  uint64_t size = 0;
  uint64_t checksum = 0;
  std::vector<Replica> replicas;
  // Colder: puts, tier moves, recovery.
  uint64_t put_id = 0;     // PutEnd/PutRevoke must name the put that created it
  uint32_t disk_hits = 0;  // reads served from disk since it was last in memory
  // A promotion (copy back from disk) in flight, 0 = none. Its memory range is held by the
  // master's promotion table, not here, so removing the object meanwhile cannot free a
  // range a requester is still writing.
  uint64_t promotion_id = 0;
  SteadyTime put_started{};
  // Rebuilt from a store's index by restart recovery: not removed, even by a forced Remove,
  // before this (readers may still hold leases the previous master granted).
  SteadyTime held_until{};
  // An upsert in flight (at most one): the object is not evicted, removed or upserted again
  // meanwhile. Null otherwise.
  std::unique_ptr<PendingVersion> next;
};

// Whether `meta`'s soft pin still holds at `now` (its TTL, if any, not yet run out).
inline bool SoftPinned(const ObjectMeta& meta, SteadyTime now) {
  return meta.soft_pin && (meta.soft_pin_until == SteadyTime{} || now < meta.soft_pin_until);
}

// The store-index entry of an object (what a store keeps to be recovered from), without its
// replica's place (offset or disk location: the caller adds it).
IndexEntry IndexEntryOf(std::string_view key, const ObjectMeta& meta);

// The replicas of a version an upsert replaced while readers held a lease on it: kept
// allocated until the lease ends (readers finish reading the old bytes), then freed by
// MasterService::ReclaimAbandonedPuts.
struct RetiredVersion {
  std::vector<Replica> replicas;
  SteadyTime free_after{};
};

struct GroupMeta {
  std::unordered_set<std::string, KeyHash, KeyEq> members;
  SteadyTime lease_deadline{};
};

// Open addressing (absl's SwissTable): a lookup touches one control group and
// one slot, both prefetchable, instead of a chain of nodes.
template <typename V>
using KeyMap = absl::flat_hash_map<std::string, V, KeyHash, KeyEq>;
using ObjectMap = absl::flat_hash_map<StoredKey, ObjectMeta, KeyHash, KeyEq>;

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
  std::unordered_map<uint64_t, ObjectMeta> parked;
  std::vector<RetiredVersion> retired;  // guarded by mu
  // Keys stored here that began a put or an upsert since maintenance last looked at them
  // (their put may have ended since; a key may be listed twice): what
  // MasterService::ReclaimAbandonedPuts visits, instead of every object. Guarded by mu.
  std::vector<std::string> pending_keys;
  // When pending_keys reaches this size, NotePending drops the keys whose put ended (so a
  // master whose maintenance does not run, or runs late, keeps it bounded). Guarded by mu.
  size_t pending_compact_at = 1024;
  // Where the next eviction window starts (the key after the last one visited; "" = the
  // beginning): MasterService::CollectCandidates. Guarded by mu.
  std::string eviction_cursor;
};

class ObjectTable {
 public:
  explicit ObjectTable(uint32_t num_shards);

  uint32_t num_shards() const { return static_cast<uint32_t>(shards_.size()); }
  Shard& shard(uint32_t index) { return *shards_[index]; }
  uint32_t ShardOf(std::string_view key_or_group) const {
    return ShardOfHash(HashKey(key_or_group));
  }
  uint32_t ShardOfHash(uint64_t hash) const {
    // High bits pick the shard; the tables probe with the low ones.
    return static_cast<uint32_t>((hash >> 40) % shards_.size());
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
  // Keys: any random-access container of strings or string_views.
  template <typename Keys, typename Fn, typename Missing>
  void ForEachKey(const Keys& keys, const std::vector<bool>& skip, Fn&& fn, Missing&& missing);

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
                             Missing&& missing) {
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
  // Four-stage pipeline per shard, in blocks of keys, each stage's misses overlapping within its
  // block: prefetch the control bytes of block b+3; from them, prefetch the likely slot of each
  // key of block b+2 (its stored hash, key string and metadata); in block b+1 find each key's
  // slot by hash (now in cache) and prefetch its key bytes; then look up block b with
  // everything in cache.
  constexpr uint32_t kBlock = 8;
  for (uint32_t s = 0; s < num; ++s) {
    const uint32_t begin = count[s], end = count[s + 1];
    if (begin == end) continue;
    Shard& sh = *shards_[s];
    std::lock_guard lock(sh.mu);
    auto prefetch_ctrl = [&](uint32_t from) {
      for (uint32_t j = from; j < std::min(end, from + kBlock); ++j) {
        sh.objects.prefetch(HashOnly{hashes[order[j]]});
      }
    };
    auto prefetch_slots = [&](uint32_t from) {
      for (uint32_t j = from; j < std::min(end, from + kBlock); ++j) {
        auto it = sh.objects.find(SlotProbe{hashes[order[j]]});
        if (it != sh.objects.end()) {
          // The key and the metadata a lookup reads (ObjectMeta's fields up to `replicas`).
          const char* slot = reinterpret_cast<const char*>(&*it);
          const char* hot_end = reinterpret_cast<const char*>(&it->second.replicas + 1);
          for (const char* p = slot; p < hot_end; p += 64) __builtin_prefetch(p, 1);
          __builtin_prefetch(hot_end - 1, 1);
        }
      }
    };
    auto prefetch_keys = [&](uint32_t from) {
      for (uint32_t j = from; j < std::min(end, from + kBlock); ++j) {
        auto it = sh.objects.find(HashOnly{hashes[order[j]]});
        if (it != sh.objects.end()) {
          const char* key = it->first.str.data();
          const size_t len = it->first.str.size();
          for (size_t off = 0; off < len && off < 256; off += 64) __builtin_prefetch(key + off);
          __builtin_prefetch(key + len - 1);
        }
      }
    };
    prefetch_ctrl(begin);
    prefetch_ctrl(begin + kBlock);
    prefetch_ctrl(begin + 2 * kBlock);
    prefetch_slots(begin);
    prefetch_slots(begin + kBlock);
    prefetch_keys(begin);
    for (uint32_t j = begin; j < end; ++j) {
      if ((j - begin) % kBlock == 0) {
        prefetch_ctrl(j + 3 * kBlock);
        prefetch_slots(j + 2 * kBlock);
        prefetch_keys(j + kBlock);
      }
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
