// Keys of the master's tables: the hash every table probes with, the compact copy of a key an
// object entry owns, and the transparent hash and equality of the maps keyed by strings.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "master/key_arena.h"

namespace tierkv {

uint64_t HashKey(std::string_view key);

// A key with its hash computed once: batch lookups pick the shard and probe the
// table with the same hash.
struct HashedKey {
  std::string_view key;
  uint64_t hash;
};

// A stored key: its record in the shard's KeyArena (which owns the bytes; ObjectMap stores and
// frees them). 8 bytes in the entry instead of a std::string's 32. Null while it holds no key.
class KeyBytes {
 public:
  KeyBytes() = default;
  explicit KeyBytes(const char* record) : record_(record) {}

  bool holds() const { return record_ != nullptr; }
  std::string_view view() const { return record_ ? KeyArena::KeyOf(record_) : std::string_view(); }
  const char* data() const { return view().data(); }
  size_t size() const { return view().size(); }
  operator std::string_view() const { return view(); }  // NOLINT: a key reads as its bytes
  // The record (header and bytes), for prefetching and freeing (may be null).
  const char* block() const { return record_; }

 private:
  const char* record_ = nullptr;
};

// The key of an object entry: its bytes with their hash, so probes compare hashes before
// touching the key's bytes (a cache miss).
struct StoredKey {
  uint64_t hash = 0;
  KeyBytes str;
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
};
struct KeyEq {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const { return a == b; }
  bool operator()(const HashedKey& a, std::string_view b) const { return a.key == b; }
  bool operator()(std::string_view a, const HashedKey& b) const { return a == b.key; }
};

}  // namespace tierkv
