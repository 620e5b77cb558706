// A DRAM segment: one contiguous, pre-faulted, memfd-backed region.
//
// memfd so that a store process can hand the fd to same-host requesters
// (they mmap it and a get becomes one memcpy). Pre-faulted at creation because
// first touch runs ~10x slower than memcpy on these machines. 2 MiB pages when
// the kernel allows (hugetlbfs memfd, else THP advice); PageSize() says what
// was obtained. Thread-safety: immutable after Create(); the bytes themselves
// are synchronised by the master's allocation protocol, not by this class.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "tierkv/status.h"

namespace tierkv {

enum class PagePolicy {
  kHugeIfAvailable,  // hugetlbfs, then THP advice, then 4 KiB pages (logged)
  kSmallPages,       // plain 4 KiB pages
};

class MemorySegment final {
 public:
  // Maps `size` bytes (rounded up to the page size) and faults every page in.
  // INVALID_PARAMS for size 0; INTERNAL_ERROR naming the syscall on failure.
  static Result<std::unique_ptr<MemorySegment>> Create(const std::string& name, uint64_t size,
                                                       PagePolicy policy);
  ~MemorySegment();
  MemorySegment(const MemorySegment&) = delete;
  MemorySegment& operator=(const MemorySegment&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  int fd() const { return fd_; }
  const std::string& name() const { return name_; }
  // 2 MiB when huge pages were obtained (hugetlbfs or THP-advised), else 4 KiB.
  uint64_t page_size() const { return page_size_; }
  // "hugetlb", "thp" or "4k": how the pages were obtained, for logs and benches.
  const char* page_kind() const { return page_kind_; }

 private:
  MemorySegment() = default;
  std::string name_;
  uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  int fd_ = -1;
  uint64_t page_size_ = 4096;
  const char* page_kind_ = "4k";
};

}  // namespace tierkv
