// The map of one shard of the object table: key -> ObjectMeta, laid out for tens of millions
// of objects (issue 26). Entries sit in a dense array of fixed-size chunks (no load-factor
// slack, no allocation per entry, addresses that never move); an open-addressing index of
// 4-byte entry numbers (absl's SwissTable, ~8 bytes per object at its load) finds them. A
// lookup touches the index's control bytes and slot, the entry, and the key's bytes (packed in
// the shard's KeyArena); a batch prefetches each in turn (ObjectTable::ForEachKey).
//
// Iteration runs over the entries in array order; erasing or inserting never invalidates an
// iterator to another entry, nor references to entries. Not thread-safe: the shard's lock
// guards it.
#pragma once

#include <absl/container/flat_hash_set.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "master/key_arena.h"
#include "master/object_key.h"
#include "master/object_meta.h"

namespace tierkv {

// One object: its key and metadata (`first` and `second`, as in a map's value type).
struct ObjectEntry {
  StoredKey first;
  ObjectMeta second;
};

class ObjectMap {
 public:
  static constexpr uint32_t kNone = UINT32_MAX;

  template <bool Const>
  class Iter {
   public:
    using Map = std::conditional_t<Const, const ObjectMap, ObjectMap>;
    using iterator_category = std::forward_iterator_tag;
    using value_type = ObjectEntry;
    using difference_type = std::ptrdiff_t;
    using reference = std::conditional_t<Const, const ObjectEntry&, ObjectEntry&>;
    using pointer = std::conditional_t<Const, const ObjectEntry*, ObjectEntry*>;

    Iter() = default;
    Iter(Map* map, uint32_t number) : map_(map), number_(number) {}
    operator Iter<true>() const { return Iter<true>(map_, number_); }  // NOLINT

    reference operator*() const { return map_->entry(number_); }
    pointer operator->() const { return &map_->entry(number_); }
    Iter& operator++() {
      number_ = map_->NextLive(number_ + 1);
      return *this;
    }
    Iter operator++(int) {
      Iter before = *this;
      ++*this;
      return before;
    }
    bool operator==(const Iter& other) const { return number_ == other.number_; }
    // The entry's number (kNone at the end): a place to resume an iteration from.
    uint32_t number() const { return number_; }

   private:
    Map* map_ = nullptr;
    uint32_t number_ = kNone;
  };
  using iterator = Iter<false>;
  using const_iterator = Iter<true>;

  ObjectMap();
  ~ObjectMap();
  ObjectMap(const ObjectMap&) = delete;  // the index's hash reads this map's entries
  ObjectMap& operator=(const ObjectMap&) = delete;

  size_t size() const { return index_.size(); }
  bool empty() const { return index_.empty(); }

  iterator begin() { return iterator(this, NextLive(0)); }
  iterator end() { return iterator(this, kNone); }
  const_iterator begin() const { return const_iterator(this, NextLive(0)); }
  const_iterator end() const { return const_iterator(this, kNone); }
  // The first entry at or after entry number `number` (end() if none): where a walk that
  // stopped before `number` resumes.
  iterator from(uint32_t number) { return iterator(this, NextLive(number)); }

  iterator find(const HashedKey& key) { return Found(index_.find(key)); }
  iterator find(std::string_view key) { return find(HashedKey{key, HashKey(key)}); }
  bool contains(const HashedKey& key) const { return index_.contains(key); }
  bool contains(std::string_view key) const { return contains(HashedKey{key, HashKey(key)}); }

  // Inserts `key` (whose hash is `hash`) with `meta` unless it is there; returns the entry and
  // whether it was inserted (as std::unordered_map::emplace).
  std::pair<iterator, bool> emplace(std::string_view key, uint64_t hash, ObjectMeta meta);
  std::pair<iterator, bool> emplace(std::string_view key, ObjectMeta meta) {
    return emplace(key, HashKey(key), std::move(meta));
  }
  // Destroys the entry (its metadata's replicas are freed now: move them out first to keep
  // them). Iterators to other entries stay valid.
  void erase(iterator it);
  void clear();
  // Makes room in the index for `n` entries without rehashing on the way.
  void reserve(size_t n) { index_.reserve(n); }
  // About `n` more entries are coming at once (a restart's adoption): the entries' memory for
  // them is faulted in now, in one call per chunk (common/prefault.h), instead of a page fault
  // per 4 KiB as each is first written.
  void PrefaultEntries(size_t n);

  // How much of an entry a batch lookup reads, so that its prefetch brings in that much only:
  // the key and the lease (exists), or on up to the replicas (get).
  enum class EntryReads { kLease, kReplicas };
  // The stages of a batch lookup's prefetch pipeline (ObjectTable::ForEachKey), each needing
  // the previous one's lines in cache: the index's control bytes and slot group, then the
  // entry the most likely slot names, then the key bytes of the entry whose hash matches.
  void PrefetchIndex(uint64_t hash) const { index_.prefetch(HashOnly{hash}); }
  void PrefetchEntry(uint64_t hash, EntryReads reads) const;
  void PrefetchKey(uint64_t hash) const;

 private:
  // Chunk k holds kFirstChunk << k entries, numbered from kFirstChunk * (2^k - 1): a small
  // shard stays small, a large one takes a few large blocks. Entries are constructed when
  // first allocated, so the tail of the last chunk is never touched (and, in the blocks malloc
  // maps, never resident). Huge pages were tried and left out: a partly used 2 MiB page per
  // shard cost 116 B per object at 1 Mi objects, for no recovery or lookup gain measurable here.
  static constexpr uint32_t kFirstChunkBits = 9;
  static constexpr uint32_t kFirstChunk = 1u << kFirstChunkBits;

  // Looks up exactly the entry with this number (erase).
  struct EntryAt {
    uint32_t number;
    uint64_t hash;
  };
  struct IndexHash {
    using is_transparent = void;
    const ObjectMap* map;
    size_t operator()(uint32_t n) const { return map->entry(n).first.hash(); }
    size_t operator()(const HashedKey& k) const { return k.hash; }
    size_t operator()(HashOnly k) const { return k.hash; }
    size_t operator()(SlotProbe k) const { return k.hash; }
    size_t operator()(EntryAt k) const { return k.hash; }
  };
  // absl passes the element and the looked-up key in either order: both are defined.
  struct IndexEq {
    using is_transparent = void;
    const ObjectMap* map;
    bool operator()(uint32_t a, uint32_t b) const { return a == b; }
    bool operator()(const HashedKey& k, uint32_t n) const {
      const StoredKey& s = map->entry(n).first;
      return s.hash() == k.hash && s.view() == k.key;
    }
    bool operator()(HashOnly k, uint32_t n) const { return map->entry(n).first.hash() == k.hash; }
    bool operator()(SlotProbe, uint32_t) const { return true; }
    bool operator()(EntryAt k, uint32_t n) const { return k.number == n; }
    template <typename K>
    bool operator()(uint32_t n, const K& k) const {
      return (*this)(k, n);
    }
  };
  using Index = absl::flat_hash_set<uint32_t, IndexHash, IndexEq>;

  static uint32_t ChunkOf(uint32_t n) {
    return static_cast<uint32_t>(std::bit_width((uint64_t{n} >> kFirstChunkBits) + 1)) - 1;
  }
  static uint64_t ChunkStart(uint32_t k) {
    return uint64_t{kFirstChunk} * ((uint64_t{1} << k) - 1);
  }
  static size_t ChunkBytes(uint32_t k) { return (size_t{kFirstChunk} << k) * sizeof(ObjectEntry); }
  ObjectEntry& entry(uint32_t n) {
    const uint32_t k = ChunkOf(n);
    return chunks_[k][n - ChunkStart(k)];
  }
  const ObjectEntry& entry(uint32_t n) const {
    const uint32_t k = ChunkOf(n);
    return chunks_[k][n - ChunkStart(k)];
  }
  // The first live entry numbered `from` or above; kNone if none.
  uint32_t NextLive(uint32_t from) const;
  template <typename IndexIt>
  iterator Found(IndexIt i) {
    return i == index_.end() ? end() : iterator(this, *i);
  }
  // A free entry's number: one erased before, else the next one never used.
  uint32_t Allocate();
  // Makes chunk k exist (k is at most one past the last).
  void EnsureChunk(uint32_t k);

  Index index_;
  std::vector<ObjectEntry*> chunks_;  // ChunkBytes(k) bytes each, from operator new
  uint32_t used_ = 0;                 // entries numbered below this have been allocated once
  std::vector<uint32_t> free_;        // erased entries, reused first
  KeyArena keys_;                     // the entries' key bytes
};

}  // namespace tierkv
