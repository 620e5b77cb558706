// A replica of an object in the master's table, and an object's list of them.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>

#include "common/disk_location.h"
#include "master/segment_feed.h"
#include "master/segment_registry.h"
#include "memory/offset_allocator.h"
#include "tierkv/types.h"

namespace tierkv {

// A memory replica owns its allocation in the segment; a disk replica names a record in the
// SSD tier of the segment's owner (and has no allocation). On a segment whose owner keeps an
// index, a disk replica also holds a claim that tells the owner when the replica is dropped.
// The allocation and the disk location share storage: `tier` says which one is there (read
// only that one). 40 bytes instead of 80 in every object's entry.
//
// The disk location is kept in 24 bytes, its record offset in 4 KiB pages (records start on a
// page: docs/disk-format.md); DiskLocationFits says whether a location can be kept, and every
// path that adds a disk replica checks it first (a store's report is input).
struct PackedDiskLocation {
  explicit PackedDiskLocation(const DiskLocation& d)
      : generation(d.generation),
        size(d.size),
        region(d.region),
        offset_pages(static_cast<uint32_t>(d.offset >> kPageShift)) {}
  DiskLocation Unpack() const {
    return DiskLocation{region, generation, uint64_t{offset_pages} << kPageShift, size};
  }
  static constexpr unsigned kPageShift = 12;

  uint64_t generation;
  uint64_t size;
  uint32_t region;
  uint32_t offset_pages;
};

// Whether a Replica can keep `d` exactly (its offset on a 4 KiB page, below 16 TiB).
inline bool DiskLocationFits(const DiskLocation& d) {
  constexpr uint64_t kPage = uint64_t{1} << PackedDiskLocation::kPageShift;
  return d.offset % kPage == 0 && (d.offset >> PackedDiskLocation::kPageShift) <= UINT32_MAX;
}

struct Replica {
  // A disk replica's `d` must fit (DiskLocationFits).
  Replica(SegmentId s, ReplicaTier t, Allocation a = Allocation(), DiskLocation d = {})
      : tier(t), segment(s) {
    if (tier == ReplicaTier::kMemory) {
      new (&allocation) Allocation(std::move(a));
    } else {
      new (&disk) PackedDiskLocation(d);
    }
  }
  Replica(Replica&& other) noexcept : tier(other.tier), segment(other.segment) {
    if (tier == ReplicaTier::kMemory) {
      new (&allocation) Allocation(std::move(other.allocation));
    } else {
      new (&disk) PackedDiskLocation(other.disk);
    }
    claim = std::move(other.claim);
  }
  Replica& operator=(Replica&& other) noexcept {
    if (this == &other) return *this;
    this->~Replica();
    new (this) Replica(std::move(other));
    return *this;
  }
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;
  ~Replica() {
    if (tier == ReplicaTier::kMemory) allocation.~Allocation();
  }

  // Where a reader finds it, as ReplicaLocation carries them: the offset of a memory replica,
  // the record of a disk replica (the other one zero).
  uint64_t memory_offset() const { return tier == ReplicaTier::kMemory ? allocation.offset() : 0; }
  DiskLocation disk_location() const {
    return tier == ReplicaTier::kMemory ? DiskLocation{} : disk.Unpack();
  }

  // First: ReplicaList tells an inline replica from its own heap state by this byte.
  ReplicaTier tier;
  SegmentId segment;
  union {
    Allocation allocation;    // tier == kMemory
    PackedDiskLocation disk;  // tier == kDisk (disk_location() unpacks it)
  };
  std::unique_ptr<DiskClaim> claim{};
};

// An object's replicas: most objects have one, kept inside the object's entry (no heap block
// per object, no cache miss to reach it), in 40 bytes — one Replica's, with no size word beside
// it (absl::InlinedVector<Replica, 1> takes 48): the first byte is a replica's `tier`, or
// kHeapTag when the list is empty or holds two or more replicas in a heap block. A list of one
// is always inline. Move-only; iterators are pointers, invalidated by push_back and erase.
class ReplicaList {
 public:
  using iterator = Replica*;
  using const_iterator = const Replica*;

  ReplicaList() noexcept { new (raw_) Heap{}; }
  ReplicaList(ReplicaList&& other) noexcept { TakeFrom(other); }
  ReplicaList& operator=(ReplicaList&& other) noexcept {
    if (this != &other) {
      Destroy();
      TakeFrom(other);
    }
    return *this;
  }
  ReplicaList(const ReplicaList&) = delete;
  ReplicaList& operator=(const ReplicaList&) = delete;
  ~ReplicaList() { Destroy(); }

  size_t size() const { return Inline() ? 1 : heap().size; }
  bool empty() const { return size() == 0; }
  Replica* begin() { return Inline() ? one() : heap().data; }
  Replica* end() { return begin() + size(); }
  const Replica* begin() const { return const_cast<ReplicaList*>(this)->begin(); }
  const Replica* end() const { return begin() + size(); }
  Replica& operator[](size_t i) { return begin()[i]; }
  const Replica& operator[](size_t i) const { return begin()[i]; }
  Replica& front() { return *begin(); }
  const Replica& front() const { return *begin(); }

  void push_back(Replica&& r) {
    if (Inline()) {
      // The second replica: both move to a heap block.
      Replica* data = Allocate(2);
      new (&data[0]) Replica(std::move(*one()));
      new (&data[1]) Replica(std::move(r));
      one()->~Replica();
      new (raw_) Heap{kHeapTag, 2, 2, data};
      return;
    }
    Heap& h = heap();
    if (h.size == 0) {
      new (raw_) Replica(std::move(r));  // (an empty list holds no block)
      return;
    }
    if (h.size == h.capacity) {
      Replica* data = Allocate(2 * h.capacity);
      for (uint32_t k = 0; k < h.size; ++k) {
        new (&data[k]) Replica(std::move(h.data[k]));
        h.data[k].~Replica();
      }
      ::operator delete(h.data);
      h.data = data;
      h.capacity *= 2;
    }
    new (&h.data[h.size]) Replica(std::move(r));
    ++h.size;
  }

  // Erases [first, last), which lie in this list; the ones after move down.
  void erase(Replica* first, Replica* last) {
    if (first == last) return;
    if (Inline()) {
      one()->~Replica();
      new (raw_) Heap{};
      return;
    }
    Heap& h = heap();
    Replica* const e = h.data + h.size;
    Replica* out = first;
    for (Replica* p = last; p != e; ++p, ++out) *out = std::move(*p);
    for (Replica* p = out; p != e; ++p) p->~Replica();
    h.size = static_cast<uint32_t>(out - h.data);
    if (h.size > 1) return;
    // One left (back inline, as every list of one) or none: the block goes. (`h` lives in
    // raw_: read it before raw_ is reused.)
    Replica* const data = h.data;
    const uint32_t left = h.size;
    if (left == 1) {
      new (raw_) Replica(std::move(data[0]));
      data[0].~Replica();
    } else {
      new (raw_) Heap{};
    }
    ::operator delete(data);
  }
  void clear() { erase(begin(), end()); }

 private:
  static constexpr auto kHeapTag = static_cast<ReplicaTier>(0xff);
  struct Heap {
    ReplicaTier tag = kHeapTag;  // where a Replica keeps its tier
    uint32_t size = 0;
    uint32_t capacity = 0;
    Replica* data = nullptr;
  };
  static_assert(sizeof(Heap) <= sizeof(Replica) && alignof(Heap) <= alignof(Replica));

  // The first byte of either object: a Replica's tier or the Heap's tag (read as bytes, which
  // is allowed whichever of the two lives there).
  bool Inline() const {
    ReplicaTier first;
    std::memcpy(&first, raw_, 1);
    return first != kHeapTag;
  }
  Replica* one() { return std::launder(reinterpret_cast<Replica*>(raw_)); }
  Heap& heap() { return *std::launder(reinterpret_cast<Heap*>(raw_)); }
  const Heap& heap() const { return *std::launder(reinterpret_cast<const Heap*>(raw_)); }
  static Replica* Allocate(uint32_t n) {
    return static_cast<Replica*>(::operator new(sizeof(Replica) * n));
  }
  void Destroy() {
    if (Inline()) {
      one()->~Replica();
      return;
    }
    Heap& h = heap();
    for (uint32_t k = 0; k < h.size; ++k) h.data[k].~Replica();
    ::operator delete(h.data);
  }
  // Leaves `other` empty.
  void TakeFrom(ReplicaList& other) {
    if (other.Inline()) {
      new (raw_) Replica(std::move(*other.one()));
      other.one()->~Replica();
    } else {
      new (raw_) Heap(other.heap());
    }
    new (other.raw_) Heap{};
  }

  alignas(Replica) unsigned char raw_[sizeof(Replica)];
};

// std::erase_if for a ReplicaList.
template <typename Pred>
size_t EraseReplicasIf(ReplicaList& replicas, Pred&& pred) {
  auto keep = std::remove_if(replicas.begin(), replicas.end(), pred);
  const auto n = static_cast<size_t>(replicas.end() - keep);
  replicas.erase(keep, replicas.end());
  return n;
}

}  // namespace tierkv
