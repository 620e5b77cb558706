#include "memory/memory_segment.h"

#include <fcntl.h>
#include <linux/memfd.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "common/align.h"
#include "common/errno_text.h"
#include "common/proc_files.h"

// Kernel 5.14+; older headers lack it (the kernel then answers EINVAL).
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace tierkv {
namespace {

constexpr uint64_t kHugePageSize = uint64_t{2} << 20;
// memfd names longer than this fail with EINVAL; the name is only a debugging aid.
constexpr size_t kMaxMemfdName = 249;
// Pages checked with mincore after populating: enough to catch a silent failure.
constexpr uint64_t kResidencySamples = 64;

uint64_t SmallPageSize() {
  const long page = sysconf(_SC_PAGESIZE);
  return page > 0 ? static_cast<uint64_t>(page) : 4096;
}

Status SyscallError(const char* call, int err) {
  return Status(ErrorCode::INTERNAL_ERROR, std::string(call) + " failed: " + ErrnoText(err));
}

// `fallback` keeps the earlier hugetlb failure visible when the 4 KiB path fails too.
Status WithContext(const std::string& segment, const Status& status, const std::string& fallback) {
  std::string message = "memory segment '" + segment + "': " + status.message();
  if (!fallback.empty()) message += " (after " + fallback + ")";
  return Status(status.code(), std::move(message));
}

// Owns a memfd and its mapping until handed to the MemorySegment, so that
// every early return closes and unmaps what was opened.
struct Region {
  Region() = default;
  Region(Region&& other) noexcept { *this = std::move(other); }
  Region& operator=(Region&& other) noexcept {
    if (this != &other) {
      Reset();
      fd = std::exchange(other.fd, -1);
      base = std::exchange(other.base, nullptr);
      size = std::exchange(other.size, 0);
    }
    return *this;
  }
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;
  ~Region() { Reset(); }

  void Reset() {
    if (base != nullptr) munmap(base, size);
    if (fd >= 0) close(fd);
    fd = -1;
    base = nullptr;
    size = 0;
  }

  int fd = -1;
  void* base = nullptr;
  uint64_t size = 0;
};

// memfd of `size` bytes mapped shared, not yet faulted in: THP advice must
// precede the first fault, so population is a separate step.
Result<Region> OpenAndMap(const std::string& memfd_name, uint64_t size, unsigned int flags) {
  Region region;
  region.fd = memfd_create(memfd_name.c_str(), flags);
  if (region.fd < 0) return SyscallError("memfd_create", errno);
  if (ftruncate(region.fd, static_cast<off_t>(size)) != 0) {
    return SyscallError("ftruncate", errno);
  }
  void* base = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, region.fd, 0);
  if (base == MAP_FAILED) return SyscallError("mmap", errno);
  region.base = base;
  region.size = size;
  return region;
}

void TouchEveryPage(const Region& region, uint64_t page_size) {
  // The memfd is fresh, so writing a zero changes no byte but forces a write fault.
  volatile uint8_t* bytes = static_cast<uint8_t*>(region.base);
  for (uint64_t off = 0; off < region.size; off += page_size) bytes[off] = 0;
}

// Faults every page in, writable. MADV_POPULATE_WRITE (unlike MAP_POPULATE)
// reports failure instead of leaving holes that would fault later.
Status Populate(const Region& region, uint64_t page_size, bool allow_fallocate) {
  if (madvise(region.base, region.size, MADV_POPULATE_WRITE) == 0) return Status::Ok();
  if (errno != EINVAL) return SyscallError("madvise(MADV_POPULATE_WRITE)", errno);
  // Pre-5.14 kernel. fallocate makes out-of-memory an error here rather than a
  // SIGBUS while touching; it is skipped after THP advice because it would
  // allocate small pages before the VMA is ever faulted.
  if (allow_fallocate && fallocate(region.fd, 0, 0, static_cast<off_t>(region.size)) != 0) {
    return SyscallError("fallocate", errno);
  }
  TouchEveryPage(region, page_size);
  return Status::Ok();
}

// Number of sampled pages that mincore reports non-resident (0 on success).
uint64_t MissingSamples(const Region& region, uint64_t page_size) {
  const uint64_t pages = region.size / page_size;
  const uint64_t step = pages > kResidencySamples ? pages / kResidencySamples : 1;
  uint64_t missing = 0;
  for (uint64_t page = 0; page < pages; page += step) {
    unsigned char vec = 0;
    if (mincore(static_cast<uint8_t*>(region.base) + page * page_size, 1, &vec) != 0 ||
        (vec & 1) == 0) {
      ++missing;
    }
  }
  return missing;
}

// The selected value of /sys/kernel/mm/transparent_hugepage/shmem_enabled
// ("never", "advise", ...), or "" when it cannot be read.
std::string ShmemThpMode() {
  const std::string line = ReadTextFile("/sys/kernel/mm/transparent_hugepage/shmem_enabled");
  const size_t open = line.find('[');
  const size_t close_pos = line.find(']', open);
  if (open == std::string::npos || close_pos == std::string::npos) return "";
  return line.substr(open + 1, close_pos - open - 1);
}

bool ThpModeAllowsHuge(const std::string& mode) {
  return mode == "always" || mode == "within_size" || mode == "advise" || mode == "force";
}

}  // namespace

Result<std::unique_ptr<MemorySegment>> MemorySegment::Create(const std::string& name, uint64_t size,
                                                             PagePolicy policy) {
  if (size == 0) {
    return Result<std::unique_ptr<MemorySegment>>(
        ErrorCode::INVALID_PARAMS, "memory segment '" + name + "': size must be positive");
  }
  // Rounding must not overflow and the size must fit off_t for ftruncate.
  if (size > static_cast<uint64_t>(std::numeric_limits<off_t>::max()) - kHugePageSize) {
    return Result<std::unique_ptr<MemorySegment>>(
        ErrorCode::INVALID_PARAMS,
        "memory segment '" + name + "': size " + std::to_string(size) + " too large");
  }
  const std::string memfd_name = name.substr(0, kMaxMemfdName);
  const uint64_t small_page = SmallPageSize();
  const bool want_huge = policy == PagePolicy::kHugeIfAvailable;

  Region region;
  uint64_t page_size = small_page;
  const char* page_kind = "4k";
  std::string fallback;  // why huge pages were not obtained, for the log

  if (want_huge) {
    // hugetlbfs: fails at mmap with ENOMEM when no huge pages are reserved.
    auto huge = OpenAndMap(memfd_name, RoundUp(size, kHugePageSize),
                           MFD_CLOEXEC | MFD_HUGETLB | MFD_HUGE_2MB);
    Status status =
        huge.ok() ? Populate(*huge, kHugePageSize, /*allow_fallocate=*/true) : huge.status();
    if (status.ok()) {
      region = std::move(*huge);
      page_size = kHugePageSize;
      page_kind = "hugetlb";
    } else {
      fallback = "hugetlb: " + status.message();
    }
  }

  if (region.base == nullptr) {
    const std::string thp_mode = ShmemThpMode();
    const bool thp_possible = ThpModeAllowsHuge(thp_mode);
    const bool try_thp = want_huge && thp_possible;
    auto shm =
        OpenAndMap(memfd_name, RoundUp(size, try_thp ? kHugePageSize : small_page), MFD_CLOEXEC);
    if (!shm.ok()) return WithContext(name, shm.status(), fallback);
    region = std::move(*shm);

    bool advised = false;
    if (try_thp) {
      if (madvise(region.base, region.size, MADV_HUGEPAGE) == 0) {
        advised = true;
      } else {
        fallback += "; thp: madvise(MADV_HUGEPAGE) failed: " + ErrnoText(errno);
      }
    } else if (want_huge) {
      fallback += "; thp: shmem_enabled is '" + (thp_mode.empty() ? "unreadable" : thp_mode) + "'";
    } else if (thp_possible) {
      // 'always'/'within_size' would hand out 2 MiB pages unasked.
      madvise(region.base, region.size, MADV_NOHUGEPAGE);
    }

    Status status = Populate(region, small_page, /*allow_fallocate=*/!advised);
    if (!status.ok()) return WithContext(name, status, fallback);

    if (thp_possible) {
      // Advice is only a hint (alignment, fragmentation): report what smaps says.
      const std::optional<uint64_t> pmd = SmapsFieldBytes(region.base, "ShmemPmdMapped");
      if (pmd.has_value() ? *pmd > 0 : advised) {
        page_size = kHugePageSize;
        page_kind = "thp";
      } else if (advised) {
        fallback += "; thp: advised but the kernel mapped no 2 MiB pages";
      }
    }
  }

  if (const uint64_t missing = MissingSamples(region, page_size); missing > 0) {
    spdlog::warn(
        "memory segment '{}': {} of the sampled pages not resident after populating; "
        "touching every page",
        name, missing);
    TouchEveryPage(region, page_size);
  }

  std::unique_ptr<MemorySegment> segment(new MemorySegment());
  segment->name_ = name;
  segment->page_size_ = page_size;
  segment->page_kind_ = page_kind;
  segment->fd_ = std::exchange(region.fd, -1);
  segment->base_ = static_cast<uint8_t*>(std::exchange(region.base, nullptr));
  segment->size_ = std::exchange(region.size, 0);

  if (fallback.empty()) {
    spdlog::info("memory segment '{}': {} bytes, page_kind={} page_size={}", name, segment->size_,
                 page_kind, page_size);
  } else {
    spdlog::info("memory segment '{}': {} bytes, page_kind={} page_size={} (fallback: {})", name,
                 segment->size_, page_kind, page_size, fallback);
  }
  return segment;
}

MemorySegment::~MemorySegment() {
  if (base_ != nullptr) munmap(base_, size_);
  if (fd_ >= 0) close(fd_);
}

}  // namespace tierkv
