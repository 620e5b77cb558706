// Memory for tables of millions of entries (the master's object table): blocks of 2 MiB and
// more come straight from mmap with transparent huge pages asked for (MADV_HUGEPAGE; honoured
// where THP is "always" or "madvise"), smaller ones from operator new. Huge pages cut the page
// faults of filling such a table 512-fold (recovery of 10 M objects spent a sixth of its time
// in them on a VM) and the TLB misses of random lookups into it.
#pragma once

#include <cstddef>
#include <new>

namespace tierkv {

// Threshold from which LargeAllocate maps and advises huge pages.
inline constexpr size_t kLargeBlockBytes = size_t{2} << 20;

// Memory for `bytes` bytes aligned to alignof(std::max_align_t) at least; throws
// std::bad_alloc. Pages are touched only when written (mmap'd blocks start unpopulated).
void* LargeAllocate(size_t bytes);
// Frees what LargeAllocate(bytes) returned (`bytes` must be the same).
void LargeFree(void* p, size_t bytes) noexcept;

// An allocator for absl and standard containers backed by LargeAllocate.
template <typename T>
struct LargeAllocator {
  using value_type = T;
  LargeAllocator() = default;
  template <typename U>
  LargeAllocator(const LargeAllocator<U>&) noexcept {}  // NOLINT: rebinding is implicit
  T* allocate(size_t n) {
    static_assert(alignof(T) <= alignof(std::max_align_t), "over-aligned type");
    return static_cast<T*>(LargeAllocate(n * sizeof(T)));
  }
  void deallocate(T* p, size_t n) noexcept { LargeFree(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const LargeAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace tierkv
