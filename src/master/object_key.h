// Keys of the master's tables: the hash every table probes with, the compact copy of a key an
// object entry owns, and the transparent hash and equality of the maps keyed by strings.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace tierkv {

// HashKey keeps this many bits of xxh3: the rest of a stored key's first 8 bytes hold its
// length (StoredKey). 2^48 values leave collisions, which only cost a key comparison, as rare
// as ever at any table size a master holds.
inline constexpr int kKeyHashBits = 48;
inline constexpr uint64_t kKeyHashMask = (uint64_t{1} << kKeyHashBits) - 1;

// The hash every table of keys probes with: xxh3's low kKeyHashBits bits.
uint64_t HashKey(std::string_view key);

// A key with its hash computed once: batch lookups pick the shard and probe the
// table with the same hash.
struct HashedKey {
  std::string_view key;
  uint64_t hash;
};

// The key of an object entry: its hash and length in one word (probes compare hashes before
// touching the key's bytes, a cache miss) and the address of its bytes, which the shard's
// KeyArena owns (ObjectMap stores and frees them). 16 bytes, in the entry's first cache line.
// Holds nothing (null bytes) until ObjectMap fills it.
class StoredKey {
 public:
  static constexpr size_t kMaxLength = (size_t{1} << (64 - kKeyHashBits)) - 1;

  StoredKey() = default;
  // `length` <= kMaxLength (ObjectMap checks); `hash` from HashKey.
  StoredKey(uint64_t hash, const char* bytes, size_t length)
      : hash_and_length_(hash | uint64_t{length} << kKeyHashBits), bytes_(bytes) {}

  uint64_t hash() const { return hash_and_length_ & kKeyHashMask; }
  size_t size() const { return hash_and_length_ >> kKeyHashBits; }
  bool holds() const { return bytes_ != nullptr; }
  const char* data() const { return bytes_; }
  std::string_view view() const { return std::string_view(bytes_, size()); }
  operator std::string_view() const { return view(); }  // NOLINT: a key reads as its bytes

 private:
  uint64_t hash_and_length_ = 0;
  const char* bytes_ = nullptr;
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
