// Value types shared by the public API: put options and replica descriptions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tierkv {

// Longest key accepted, in bytes. Keys are non-empty valid UTF-8 without NUL.
inline constexpr size_t kMaxKeyLength = 4096;
// Keys of a tenant other than "default" are stored as kKeyNamespaceMark + tenant +
// kKeyNamespaceMark + key (DistributedStore's tenant_id; docs/python.md, "Tenants").
inline constexpr char kKeyNamespaceMark = '\x1d';

// How a batch of objects is placed and protected (Mooncake's ReplicateConfig).
struct ReplicateConfig {
  size_t replica_num = 1;         // replicas, each on a distinct segment
  std::string preferred_segment;  // segment name tried first; "" = freest
  bool with_soft_pin = false;     // evicted only after unpinned objects
  bool with_hard_pin = false;     // never evicted (remove still works)
  // How long a soft pin holds, from the put: 0 = the master's default (soft_pin_ttl_ms of
  // its options; 0 there = until the object is removed). Ignored without with_soft_pin.
  uint64_t soft_pin_ttl_ms = 0;
  // Segments (ids, as the master numbers them) not to place a replica on: the client fills it
  // with segments it cannot reach, so a put is never placed where its writer cannot write.
  std::vector<uint32_t> excluded_segments;
  // One group id per key of the batch ("" = ungrouped), or empty = all ungrouped.
  // A group is leased and evicted as a whole.
  std::vector<std::string> group_ids;
  // Optional engine hint, one per key of the batch, or empty = no hints: the key of the chunk
  // this one extends (its predecessor in the prefix chain; "" = a first chunk or unknown).
  // Only eviction policies that learn reuse read it (eviction_policy "reuse": a chunk smaller
  // than its parent is a request's tail); a parent that is not stored is ignored. Every other
  // policy, and objects put without it, behave as before.
  std::vector<std::string> parent_keys;
};

enum class ReplicaTier : uint8_t { kMemory = 0, kDisk = 1 };

// Where one replica of an object is (Client::BatchGetReplicaDesc). The same in every mode: a
// disk replica's place is given in its owner's SSD tier, wherever that owner runs.
struct ReplicaDesc {
  ReplicaTier tier = ReplicaTier::kMemory;
  std::string segment_name;  // the segment the replica is on, or whose SSD tier holds it
  // Memory: the byte offset of the object in the segment. Disk: the byte offset of the
  // object's record within its region of the tier.
  uint64_t offset = 0;
  uint64_t size = 0;    // the object's size in bytes
  uint32_t region = 0;  // disk: the region of the tier holding the record; memory: 0
};

}  // namespace tierkv
