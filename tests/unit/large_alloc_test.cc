// LargeAllocate: small blocks from operator new, large ones mapped on huge-page boundaries.
#include "common/large_alloc.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace tierkv {
namespace {

TEST(LargeAllocTest, BlocksOfEverySizeAreUsableAndLargeOnesStartOnAHugePage) {
  for (size_t bytes : {size_t{1}, size_t{4096}, kLargeBlockBytes - 1, kLargeBlockBytes,
                       kLargeBlockBytes + 1, 3 * kLargeBlockBytes + 12345}) {
    auto* p = static_cast<unsigned char*>(LargeAllocate(bytes));
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignof(std::max_align_t), 0u) << bytes;
    if (bytes >= kLargeBlockBytes) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % kLargeBlockBytes, 0u) << bytes;
    }
    std::memset(p, 0xab, bytes);  // every byte writable
    EXPECT_EQ(p[0], 0xab);
    EXPECT_EQ(p[bytes - 1], 0xab);
    LargeFree(p, bytes);
  }
  LargeFree(nullptr, 0);
}

TEST(LargeAllocTest, ServesAStandardContainer) {
  std::vector<uint64_t, LargeAllocator<uint64_t>> v;
  for (uint64_t i = 0; i < 1'000'000; ++i) v.push_back(i * 3);  // grows past 2 MiB
  uint64_t sum = 0;
  for (uint64_t x : v) sum += x;
  EXPECT_EQ(sum, 3 * (999'999ull * 1'000'000ull / 2));
}

}  // namespace
}  // namespace tierkv
