// IoBuffer: an owning, aligned, pre-faulted anonymous buffer for O_DIRECT IO.
//
// What: mmap'd anonymous memory. With huge pages wanted (the default) the size is rounded up
// to 2 MiB, the start is 2 MiB-aligned and MADV_HUGEPAGE is set before the first fault, so
// the kernel can back it with 2 MiB pages (twice the O_DIRECT throughput of 4 KiB pages on
// these machines, see shared/LIMITS.md); otherwise the size is rounded up to 4 KiB and
// MADV_NOHUGEPAGE is set. Every page is faulted in at allocation (MADV_POPULATE_WRITE, or
// touching each page on kernels before 5.14), so IO never pays first-touch faults.
// huge_page_bytes() reports what the kernel really gave (AnonHugePages of the buffer's VMA
// in /proc/self/smaps; if neighbouring buffers with the same flags got merged into one VMA
// the figure is the VMA's, capped at size()). Bytes start zeroed.
//
// Errors: Allocate returns INVALID_PARAMS for size 0 or a size too large to round, and
// INTERNAL_ERROR naming mmap/madvise and the errno when memory cannot be mapped or faulted.
// Ownership: move-only RAII; the destructor munmaps. A moved-from buffer is empty.
// Thread-safety: the object is not synchronised (like a std::vector); its bytes are the
// caller's to synchronise.
#pragma once

#include <cstdint>

#include "tierkv/status.h"

namespace tierkv {

class IoBuffer {
 public:
  static constexpr uint64_t kHugePageSize = uint64_t{2} << 20;
  static constexpr uint64_t kSmallPageSize = 4096;

  // Maps and pre-faults at least `size` bytes (see above for the rounding).
  static Result<IoBuffer> Allocate(uint64_t size, bool want_huge_pages = true);

  IoBuffer() = default;  // empty: data() == nullptr, size() == 0
  ~IoBuffer();
  IoBuffer(IoBuffer&& other) noexcept;
  IoBuffer& operator=(IoBuffer&& other) noexcept;
  IoBuffer(const IoBuffer&) = delete;
  IoBuffer& operator=(const IoBuffer&) = delete;

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  bool empty() const { return data_ == nullptr; }
  // Bytes of the buffer backed by 2 MiB pages right after allocation (0 when unknown).
  uint64_t huge_page_bytes() const { return huge_page_bytes_; }
  bool huge_pages() const { return size_ > 0 && huge_page_bytes_ >= size_; }
  // "thp" (all 2 MiB pages), "thp-partial" or "4k": for logs and benches.
  const char* page_kind() const;

 private:
  IoBuffer(uint8_t* data, uint64_t size) : data_(data), size_(size) {}
  void Reset();

  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  uint64_t huge_page_bytes_ = 0;
};

}  // namespace tierkv
