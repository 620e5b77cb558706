// Offset allocator of one segment, and the owning Allocation handle.
//
// Best-fit over a free list kept twice, ordered by offset (for coalescing) and
// by (size, offset) (for best fit and O(log n) removal of equal sizes): O(log n) allocate and free,
// neighbours merged on free. Offsets and sizes are rounded up to `alignment`. Thread-safe (one
// mutex; it is the innermost lock of the master, see docs/architecture.md "Lock order").
//
// A fence (SetFence) delays the reuse of freed ranges: every range an Allocation frees is first
// reported to the fence, which answers with a ticket, and stays in quarantine — neither free nor
// used — until Release(ticket) (or a later ticket). The master fences the segments whose owner
// keeps an index of them (master/segment_feed.h): a range is reused only once the owner has
// acknowledged the free, so an index entry can never name another object's bytes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
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
// Holds the allocator alive (a reference of its own, not a shared_ptr: 8 bytes instead of 16 in
// every memory replica the master keeps), so a handle may outlive the segment's unmount.
class Allocation {
 public:
  Allocation() = default;
  ~Allocation() { Reset(); }
  Allocation(Allocation&& other) noexcept { *this = std::move(other); }
  Allocation& operator=(Allocation&& other) noexcept;
  Allocation(const Allocation&) = delete;
  Allocation& operator=(const Allocation&) = delete;

  bool valid() const { return owner_ != nullptr; }
  uint64_t offset() const { return offset_; }
  uint64_t size() const { return size_; }  // the aligned size actually reserved
  // The allocator this range belongs to (null for an empty handle).
  OffsetAllocator* owner() const { return owner_; }
  void Reset();

 private:
  friend class OffsetAllocator;
  // Takes one of `owner`'s references (OffsetAllocator::refs_).
  Allocation(OffsetAllocator* owner, uint64_t offset, uint64_t size);

  OffsetAllocator* owner_ = nullptr;
  uint64_t offset_ = 0;
  uint64_t size_ = 0;
};

// Decides when the ranges an allocator frees may be handed out again (see the file comment).
// Thread-safety: OnFree is called from any thread that drops an Allocation, without the
// allocator's lock (and possibly under the caller's locks): it must be quick, take only leaf
// locks and never call back into the allocator.
class FreeFence {
 public:
  virtual ~FreeFence() = default;
  // [offset, offset+size) was just freed. Returns its ticket: the range is reusable once the
  // allocator's Release() reaches it; 0 = at once.
  virtual uint64_t OnFree(uint64_t offset, uint64_t size) = 0;
};

class OffsetAllocator {
 public:
  // `alignment` must be a power of two. The allocator lives while the returned pointer (or a
  // copy) or any Allocation of it does.
  static std::shared_ptr<OffsetAllocator> Create(uint64_t capacity, uint64_t alignment = 64);

  // A handle for `size` bytes, or nullopt when no free range is large enough
  // (or size is 0).
  std::optional<Allocation> Allocate(uint64_t size);
  // A handle for exactly [offset, offset + size rounded up to the alignment), or nullopt when
  // offset is not aligned, size is 0, the range passes the capacity, or any of it is not free
  // (allocated or quarantined). Used to re-establish known ranges (restart recovery).
  std::optional<Allocation> AllocateAt(uint64_t offset, uint64_t size);

  // Installs the fence every later free goes through (once; later calls are ignored, and the
  // fence lives as long as the allocator).
  void SetFence(std::shared_ptr<FreeFence> fence);
  FreeFence* fence() const { return fence_.load(std::memory_order_acquire); }
  // Returns to the free lists the quarantined ranges whose ticket is <= `ticket` (and frees at
  // once any later free whose ticket is <= it).
  void Release(uint64_t ticket);
  // Waits until the ranges quarantined now are released, up to `timeout`; true if they were
  // (or none was quarantined).
  bool WaitForQuarantine(std::chrono::milliseconds timeout);

  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t used() const;         // held by Allocations
  uint64_t quarantined() const;  // freed, waiting for the fence's Release
  uint64_t largest_free() const;
  size_t free_ranges() const;  // fragmentation: number of disjoint free ranges

 private:
  friend class Allocation;
  OffsetAllocator(uint64_t capacity, uint64_t alignment);
  ~OffsetAllocator() = default;
  // One reference per live Allocation, and one for all the shared_ptrs Create handed out
  // together: the last one to go deletes the allocator.
  void Unref();
  void Free(uint64_t offset, uint64_t size);
  void FreeLocked(uint64_t offset, uint64_t size);  // requires mu_
  void InsertFree(uint64_t offset, uint64_t size);  // requires mu_

  const uint64_t capacity_;
  const uint64_t alignment_;
  std::atomic<uint64_t> refs_{1};
  std::atomic<FreeFence*> fence_{nullptr};  // set once; owned by fence_owner_
  std::shared_ptr<FreeFence> fence_owner_;  // guarded by mu_
  mutable std::mutex mu_;
  std::condition_variable released_cv_;
  uint64_t used_ = 0;         // guarded by mu_
  uint64_t quarantined_ = 0;  // guarded by mu_
  uint64_t released_ = 0;     // highest ticket released; mu_
  std::multimap<uint64_t, std::pair<uint64_t, uint64_t>> quarantine_;  // ticket -> range; mu_
  std::map<uint64_t, uint64_t> free_by_offset_;           // offset -> size, guarded by mu_
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;  // (size, offset), guarded by mu_
};

}  // namespace tierkv
