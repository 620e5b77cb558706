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

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/clock.h"
#include "master/segment_registry.h"
#include "tierkv/types.h"

namespace tierkv {

// Hash of keys and group ids: xxh3 (fast for ~100-byte KV keys), transparent
// so lookups by string_view don't allocate.
struct KeyHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const;
};
struct KeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
};

enum class ObjectState : uint8_t { kPending, kComplete };

struct Replica {
  SegmentId segment;
  ReplicaTier tier;
  Allocation allocation;
};

struct ObjectMeta {
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint64_t put_id = 0;  // PutEnd/PutRevoke must name the put that created it
  ObjectState state = ObjectState::kPending;
  bool soft_pin = false;
  bool hard_pin = false;
  std::string group_id;
  std::vector<Replica> replicas;
  SteadyTime put_started{};
  SteadyTime lease_deadline{};  // ungrouped objects; groups lease in GroupMeta
  SteadyTime last_access{};
};

struct GroupMeta {
  std::unordered_set<std::string, KeyHash, KeyEq> members;
  SteadyTime lease_deadline{};
};

template <typename V>
using KeyMap = std::unordered_map<std::string, V, KeyHash, KeyEq>;

struct Shard {
  std::mutex mu;
  KeyMap<ObjectMeta> objects;    // guarded by mu
  KeyMap<GroupMeta> groups;      // groups homed here, guarded by mu
  KeyMap<uint32_t> redirects;    // key -> home shard, for grouped keys, guarded by mu
};

class ObjectTable {
 public:
  explicit ObjectTable(uint32_t num_shards);

  uint32_t num_shards() const { return static_cast<uint32_t>(shards_.size()); }
  Shard& shard(uint32_t index) { return *shards_[index]; }
  uint32_t ShardOf(std::string_view key_or_group) const;
  uint32_t HomeShard(std::string_view key, std::string_view group) const {
    return ShardOf(group.empty() ? key : group);
  }

  // Locks the given shards (duplicates allowed) in ascending order.
  std::vector<std::unique_lock<std::mutex>> LockShards(std::vector<uint32_t> indices);

  // Calls fn(home_shard_index, shard, meta) under the home shard's lock if the
  // key exists; returns whether it did. fn must not take other shard locks.
  template <typename Fn>
  bool WithObject(std::string_view key, Fn&& fn);

  // Erases `key` from `shard` (which the caller has locked) and its group
  // membership; returns the ObjectMeta so the caller can drop it (freeing its
  // space) after deciding what else to clean up.
  ObjectMeta EraseLocked(Shard& shard, KeyMap<ObjectMeta>::iterator it);

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

}  // namespace tierkv
