#include "common/prefault.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace tierkv {

void PrefaultForWrite(void* p, size_t bytes, bool huge_pages) {
  if (p == nullptr || bytes < (size_t{1} << 20)) return;
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) & ~(page - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(page - 1);
  if (end <= begin) return;
  void* at = reinterpret_cast<void*>(begin);
  if (huge_pages) (void)madvise(at, end - begin, MADV_HUGEPAGE);
  (void)madvise(at, end - begin, MADV_POPULATE_WRITE);
}

}  // namespace tierkv
