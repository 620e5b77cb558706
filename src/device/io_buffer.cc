#include "device/io_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>
#include <utility>

#include "common/align.h"
#include "common/proc_files.h"

// Kernel 5.14+; older headers lack it (the kernel then answers EINVAL).
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace tierkv {
namespace {

Status SyscallError(const char* call, uint64_t size, int err) {
  return Status(ErrorCode::INTERNAL_ERROR, std::string("IoBuffer of ") + std::to_string(size) +
                                               " bytes: " + call +
                                               " failed: " + std::strerror(err));
}

}  // namespace

Result<IoBuffer> IoBuffer::Allocate(uint64_t size, bool want_huge_pages) {
  const uint64_t page = want_huge_pages ? kHugePageSize : kSmallPageSize;
  if (size == 0) return Status(ErrorCode::INVALID_PARAMS, "IoBuffer size must be positive");
  if (size > std::numeric_limits<uint64_t>::max() / 2 - 2 * kHugePageSize) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "IoBuffer size " + std::to_string(size) + " too large");
  }
  const uint64_t rounded = RoundUp(size, page);
  // Over-map by one huge page and trim, so the start is 2 MiB-aligned (THP needs it).
  const uint64_t mapped = want_huge_pages ? rounded + kHugePageSize : rounded;
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return SyscallError("mmap", rounded, errno);
  auto* base = static_cast<uint8_t*>(raw);
  if (want_huge_pages) {
    const auto addr = reinterpret_cast<uintptr_t>(raw);
    uint8_t* aligned = base + (RoundUp(addr, kHugePageSize) - addr);
    const uint64_t head = static_cast<uint64_t>(aligned - base);
    const uint64_t tail = mapped - head - rounded;
    if (head > 0) munmap(base, head);
    if (tail > 0) munmap(aligned + rounded, tail);
    base = aligned;
  }
  IoBuffer buffer(base, rounded);  // owns the mapping from here on
  // Advice before the first fault decides the page size. THP may be disabled (EINVAL): then
  // the buffer simply gets 4 KiB pages, which huge_page_bytes() reports.
  (void)madvise(base, rounded, want_huge_pages ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
  if (madvise(base, rounded, MADV_POPULATE_WRITE) != 0) {
    if (errno != EINVAL) return SyscallError("madvise(MADV_POPULATE_WRITE)", rounded, errno);
    // Pre-5.14 kernel: fault every page by hand (fresh anonymous memory reads as zero).
    volatile uint8_t* bytes = base;
    for (uint64_t off = 0; off < rounded; off += kSmallPageSize) bytes[off] = 0;
  }
  buffer.huge_page_bytes_ = std::min(SmapsFieldBytes(base, "AnonHugePages").value_or(0), rounded);
  return buffer;
}

IoBuffer::~IoBuffer() { Reset(); }

IoBuffer::IoBuffer(IoBuffer&& other) noexcept { *this = std::move(other); }

IoBuffer& IoBuffer::operator=(IoBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    huge_page_bytes_ = std::exchange(other.huge_page_bytes_, 0);
  }
  return *this;
}

void IoBuffer::Reset() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  huge_page_bytes_ = 0;
}

const char* IoBuffer::page_kind() const {
  if (huge_pages()) return "thp";
  return huge_page_bytes_ > 0 ? "thp-partial" : "4k";
}

}  // namespace tierkv
