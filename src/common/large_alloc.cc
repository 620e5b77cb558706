#include "common/large_alloc.h"

#include <sys/mman.h>

#include <cstdint>

namespace tierkv {

namespace {

size_t RoundUp(size_t bytes) { return (bytes + kLargeBlockBytes - 1) & ~(kLargeBlockBytes - 1); }

}  // namespace

void* LargeAllocate(size_t bytes) {
  if (bytes < kLargeBlockBytes) return ::operator new(bytes);
  // A whole number of huge pages, starting on a huge-page boundary (a mapping that is not
  // aligned gets huge pages only for the aligned part): map one more, unmap the slack.
  const size_t size = RoundUp(bytes);
  void* m = mmap(nullptr, size + kLargeBlockBytes, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  auto* raw = static_cast<char*>(m);
  const auto addr = reinterpret_cast<uintptr_t>(raw);
  char* p = raw + ((kLargeBlockBytes - addr % kLargeBlockBytes) % kLargeBlockBytes);
  if (p > raw) munmap(raw, static_cast<size_t>(p - raw));
  const size_t tail = static_cast<size_t>(raw + size + kLargeBlockBytes - (p + size));
  if (tail > 0) munmap(p + size, tail);
  // Advice only: without THP the block works the same with small pages.
  (void)madvise(p, size, MADV_HUGEPAGE);
  return p;
}

void LargeFree(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (bytes < kLargeBlockBytes) {
    ::operator delete(p);
    return;
  }
  munmap(p, RoundUp(bytes));
}

}  // namespace tierkv
