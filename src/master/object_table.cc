#include "master/object_table.h"

// The dispatch entry points pick AVX2/AVX-512 at run time: ~3x the SSE2
// baseline the shared library uses for plain XXH3_64bits.
#include <xxh_x86dispatch.h>

#include <algorithm>

namespace tierkv {

uint64_t HashKey(std::string_view key) {
  return XXH3_64bits(key.data(), key.size()) & kKeyHashMask;
}

IndexEntry IndexEntryOf(std::string_view key, const ObjectMeta& meta) {
  IndexEntry e;
  e.key = std::string(key);
  e.size = meta.size;
  e.checksum = meta.checksum;
  e.put_id = meta.put_id;
  e.group_id = meta.group_id();
  e.soft_pin = meta.soft_pin;
  e.hard_pin = meta.hard_pin;
  return e;
}

ObjectTable::ObjectTable(uint32_t num_shards, SteadyTime::duration lease_ttl)
    : lease_ttl_(lease_ttl) {
  shards_.reserve(std::max<uint32_t>(num_shards, 1));
  for (uint32_t i = 0; i < std::max<uint32_t>(num_shards, 1); ++i) {
    shards_.push_back(std::make_unique<Shard>());
  }
}

std::vector<std::unique_lock<std::mutex>> ObjectTable::LockShards(std::vector<uint32_t> indices) {
  std::sort(indices.begin(), indices.end());
  indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
  std::vector<std::unique_lock<std::mutex>> locks;
  locks.reserve(indices.size());
  for (uint32_t i : indices) locks.emplace_back(shards_[i]->mu);
  return locks;
}

ObjectMeta ObjectTable::EraseLocked(Shard& shard, ObjectMap::iterator it) {
  ObjectMeta meta = std::move(it->second);
  if (!meta.group_id().empty()) {
    auto g = shard.groups.find(meta.group_id());
    if (g != shard.groups.end()) {
      // By view: the member set is transparent, no string is built to erase it.
      auto m = g->second.members.find(it->first.view());
      if (m != g->second.members.end()) g->second.members.erase(m);
      if (g->second.members.empty()) shard.groups.erase(g);
    }
  }
  shard.objects.erase(it);
  if (meta.demoting) {
    const uint64_t put_id = meta.put_id;
    const SteadyTime lease = meta.own_lease_deadline(lease_ttl_);
    shard.parked.insert_or_assign(put_id, ParkedVersion{std::move(meta.replicas), lease});
    return ObjectMeta();
  }
  return meta;
}

void ObjectTable::CleanupRedirect(const std::string& key, uint32_t home) {
  const uint32_t a = ShardOf(key);
  if (a == home) return;
  auto locks = LockShards({a, home});
  Shard& s = *shards_[a];
  auto r = s.redirects.find(key);
  if (r != s.redirects.end() && r->second == home && !shards_[home]->objects.contains(key)) {
    s.redirects.erase(r);
  }
}

}  // namespace tierkv
