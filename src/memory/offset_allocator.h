// Offset allocator of one segment, and the owning Allocation handle.
//
// Best-fit over a free list kept twice, ordered by offset (for coalescing) and
// by (size, offset) (for best fit and O(log n) removal of equal sizes): O(log n) allocate and free,
// neighbours merged on free. Offsets and sizes are rounded up to `alignment`. Thread-safe (one
// mutex; it is the innermost lock of the master, see docs/architecture.md "Lock order").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <utility>

namespace tierkv {

class OffsetAllocator;

// Owns [offset, offset+size) of a segment; frees it on destruction. Move-only.
// Holds the allocator alive, so a handle may outlive the segment's unmount.
class Allocation {
 public:
  Allocation() = default;
  Allocation(std::shared_ptr<OffsetAllocator> owner, uint64_t offset, uint64_t size)
      : owner_(std::move(owner)), offset_(offset), size_(size) {}
  ~Allocation() { Reset(); }
  Allocation(Allocation&& other) noexcept { *this = std::move(other); }
  Allocation& operator=(Allocation&& other) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  bool valid() const { return owner_ != nullptr; }
  uint64_t offset() const { return offset_; }
  uint64_t size() const { return size_; }  // the aligned size actually reserved
  void Reset();

 private:
  std::shared_ptr<OffsetAllocator> owner_;
  uint64_t offset_ = 0;
  uint64_t size_ = 0;
};

class OffsetAllocator : public std::enable_shared_from_this<OffsetAllocator> {
 public:
  // `alignment` must be a power of two.
  static std::shared_ptr<OffsetAllocator> Create(uint64_t capacity, uint64_t alignment = 64);

  // A handle for `size` bytes, or nullopt when no free range is large enough
  // (or size is 0).
  std::optional<Allocation> Allocate(uint64_t size);

  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t used() const;
  uint64_t largest_free() const;
  size_t free_ranges() const;  // fragmentation: number of disjoint free ranges

 private:
  friend class Allocation;
  OffsetAllocator(uint64_t capacity, uint64_t alignment);
  void Free(uint64_t offset, uint64_t size);
  void InsertFree(uint64_t offset, uint64_t size);  // requires mu_

  const uint64_t capacity_;
  const uint64_t alignment_;
  mutable std::mutex mu_;
  uint64_t used_ = 0;                                     // guarded by mu_
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> size, guarded by mu_
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset), guarded by mu_
};

}  // namespace tierkv
