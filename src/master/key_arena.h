// The bytes of one shard's keys, packed: a key's bytes alone (the caller keeps its length, in
// the object's entry) in a slot rounded up to 4 bytes, carved from 64-byte-aligned blocks of 16
// to 256 KiB. A freed slot is reused first by the next key whose slot has the same size. At 10 M
// objects a 64-byte key takes 64 bytes here against malloc's 80 (its 8-byte header and 16-byte
// rounding) and sits in one cache line while the shard's keys share a length that is a multiple
// of 64 (a lookup compares it with one miss); a put or a restart's adoption makes no malloc call
// per key.
//
// The cost: a slot freed is reused only by a key of the same slot size, so a shard whose key
// lengths change over its life keeps the old lengths' free slots until it empties (then every
// block goes back). KV-cache keys of one deployment share a few lengths.
// Not thread-safe: the shard's lock guards it.
#pragma once

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string_view>
#include <utility>
#include <vector>

namespace tierkv {

class KeyArena {
 public:
  KeyArena() = default;
  ~KeyArena() { Clear(); }
  KeyArena(const KeyArena&) = delete;
  KeyArena& operator=(const KeyArena&) = delete;

  // Copies `key` in; returns its bytes (never null, even for an empty key), valid until Free or
  // Clear.
  const char* Store(std::string_view key);
  // Gives the slot of the bytes Store returned for a key of `length` bytes back for reuse.
  void Free(const char* bytes, size_t length);
  // Gives every block back; every key's bytes are invalid after it.
  void Clear();

  // Bytes taken from the system (blocks), for tests and accounting.
  size_t bytes_reserved() const { return reserved_; }

  static constexpr size_t kFirstBlockBytes = 16 << 10;
  static constexpr size_t kBlockBytes = 256 << 10;

 private:
  static constexpr std::align_val_t kBlockAlignment{64};  // a cache line
  // The slot of a key of `length` bytes: at least a free-list link, rounded up to 4.
  static uint32_t SlotBytes(size_t length) {
    return static_cast<uint32_t>((std::max(length, sizeof(char*)) + 3) & ~size_t{3});
  }
  char* Carve(uint32_t slot);

  // From operator new, with their sizes: kFirstBlockBytes to kBlockBytes, or one long key's slot.
  std::vector<std::pair<char*, size_t>> blocks_;
  char* next_ = nullptr;  // the unused rest of the current block
  char* end_ = nullptr;
  size_t reserved_ = 0;
  // Slot size -> the first free slot of that size; each free slot holds the next one's address
  // in its first bytes (null: the last).
  absl::flat_hash_map<uint32_t, char*> free_;
};

}  // namespace tierkv
