// The bytes of one shard's keys, packed: a record is the key's length (2 bytes, or 2 + 4 past
// 65,534) and its bytes, in a slot rounded up to 4 bytes, carved from blocks of 16 to 256 KiB. A
// freed slot is reused first by the next key whose slot has the same size. At 10 M objects a
// 64-byte key takes 68 bytes here against malloc's 80 (its 8-byte header and 16-byte rounding), and
// a put or a restart's adoption no malloc call per key.
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

  // Copies `key` in; returns its record (never null), valid until Free or Clear.
  const char* Store(std::string_view key);
  // Gives the record's slot back for reuse.
  void Free(const char* record);
  // Gives every block back; every record is invalid after it.
  void Clear();

  // A record's key.
  static std::string_view KeyOf(const char* record) {
    return std::string_view(record + HeaderBytes(record), LengthOf(record));
  }
  // The bytes of a record, header included (for prefetching).
  static size_t RecordBytes(const char* record) { return HeaderBytes(record) + LengthOf(record); }
  // Bytes taken from the system (blocks), for tests and accounting.
  size_t bytes_reserved() const { return reserved_; }

  static constexpr size_t kFirstBlockBytes = 16 << 10;
  static constexpr size_t kBlockBytes = 256 << 10;

 private:
  static constexpr uint16_t kLongMark = 0xFFFF;  // a 4-byte length follows
  static uint16_t ShortLength(const char* record) {
    uint16_t n;
    std::memcpy(&n, record, sizeof n);
    return n;
  }
  static size_t HeaderBytes(const char* record) { return ShortLength(record) == kLongMark ? 6 : 2; }
  static size_t LengthOf(const char* record) {
    const uint16_t n = ShortLength(record);
    if (n != kLongMark) return n;
    uint32_t long_n;
    std::memcpy(&long_n, record + 2, sizeof long_n);
    return long_n;
  }
  // The slot of a key of `length` bytes: header and bytes, at least a free-list link, rounded up
  // to 4.
  static uint32_t SlotBytes(size_t length) {
    const size_t record = (length < kLongMark ? 2 : 6) + length;
    return static_cast<uint32_t>((std::max<size_t>(record, sizeof(char*)) + 3) & ~size_t{3});
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
