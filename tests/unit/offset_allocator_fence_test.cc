// OffsetAllocator's exact-range allocation (restart recovery) and its fence: freed ranges stay
// in quarantine until the fence's ticket is released (memory/offset_allocator.h).
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "memory/offset_allocator.h"

namespace tierkv {
namespace {

using namespace std::chrono_literals;

// Hands out a settable ticket and records the frees it saw.
class TestFence final : public FreeFence {
 public:
  uint64_t OnFree(uint64_t offset, uint64_t size) override {
    std::lock_guard lock(mu);
    frees.emplace_back(offset, size);
    return ticket;
  }
  std::mutex mu;
  uint64_t ticket = 1;
  std::vector<std::pair<uint64_t, uint64_t>> frees;
};

TEST(OffsetAllocatorFenceTest, AllocateAtTakesExactlyThatRangeOrNothing) {
  auto alloc = OffsetAllocator::Create(64 * 1024);
  auto a = alloc->AllocateAt(4096, 100);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(a->offset(), 4096u);
  EXPECT_EQ(a->size(), 128u);  // rounded to the 64-byte alignment
  EXPECT_EQ(alloc->used(), 128u);
  EXPECT_FALSE(alloc->AllocateAt(4096 + 64, 64).has_value());        // overlaps a
  EXPECT_FALSE(alloc->AllocateAt(4000, 100).has_value());            // overlaps a's start
  EXPECT_FALSE(alloc->AllocateAt(4097, 64).has_value());             // not aligned
  EXPECT_FALSE(alloc->AllocateAt(64 * 1024 - 64, 128).has_value());  // past the end
  EXPECT_FALSE(alloc->AllocateAt(0, 0).has_value());
  auto b = alloc->AllocateAt(4096 + 128, 64);  // right after a
  ASSERT_TRUE(b.has_value());
  auto c = alloc->AllocateAt(0, 4096);  // right before a
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(alloc->free_ranges(), 1u);  // [4096+192, end)
  a.reset();
  b.reset();
  c.reset();
  EXPECT_EQ(alloc->used(), 0u);
  EXPECT_EQ(alloc->free_ranges(), 1u);  // coalesced back into one range
  EXPECT_EQ(alloc->largest_free(), 64u * 1024);
}

TEST(OffsetAllocatorFenceTest, AFreedRangeIsNotReusedBeforeItsTicketIsReleased) {
  auto alloc = OffsetAllocator::Create(4096);
  auto fence = std::make_shared<TestFence>();
  alloc->SetFence(fence);
  auto whole = alloc->Allocate(4096);
  ASSERT_TRUE(whole.has_value());
  fence->ticket = 7;
  whole.reset();
  EXPECT_EQ(alloc->used(), 0u);
  EXPECT_EQ(alloc->quarantined(), 4096u);
  EXPECT_FALSE(alloc->Allocate(64).has_value()) << "reused before the owner acknowledged";
  EXPECT_FALSE(alloc->AllocateAt(0, 64).has_value());
  alloc->Release(6);  // an earlier batch: not this free's
  EXPECT_FALSE(alloc->Allocate(64).has_value());
  alloc->Release(7);
  EXPECT_EQ(alloc->quarantined(), 0u);
  auto again = alloc->Allocate(4096);
  EXPECT_TRUE(again.has_value());
  ASSERT_EQ(fence->frees.size(), 1u);
  EXPECT_EQ(fence->frees[0], std::make_pair(uint64_t{0}, uint64_t{4096}));
}

TEST(OffsetAllocatorFenceTest, AFreeWhoseTicketWasReleasedAlreadyIsFreeAtOnce) {
  auto alloc = OffsetAllocator::Create(4096);
  auto fence = std::make_shared<TestFence>();
  alloc->SetFence(fence);
  alloc->Release(5);
  auto a = alloc->Allocate(1024);
  fence->ticket = 5;  // the batch carrying this free was acknowledged before it was recorded
  a.reset();
  EXPECT_EQ(alloc->quarantined(), 0u);
  EXPECT_EQ(alloc->largest_free(), 4096u);
  fence->ticket = 0;  // 0 = not fenced
  auto b = alloc->Allocate(1024);
  b.reset();
  EXPECT_EQ(alloc->quarantined(), 0u);
}

TEST(OffsetAllocatorFenceTest, WaitForQuarantineReturnsOnceReleasedOrTimesOut) {
  auto alloc = OffsetAllocator::Create(4096);
  auto fence = std::make_shared<TestFence>();
  alloc->SetFence(fence);
  EXPECT_TRUE(alloc->WaitForQuarantine(0ms));  // nothing quarantined
  auto a = alloc->Allocate(4096);
  fence->ticket = 3;
  a.reset();
  EXPECT_FALSE(alloc->WaitForQuarantine(20ms));
  std::thread acker([&] {
    std::this_thread::sleep_for(30ms);
    alloc->Release(3);
  });
  EXPECT_TRUE(alloc->WaitForQuarantine(5000ms));
  acker.join();
  EXPECT_TRUE(alloc->Allocate(4096).has_value());
}

}  // namespace
}  // namespace tierkv
