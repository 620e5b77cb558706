#include "memory/offset_allocator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <vector>

namespace tierkv {
namespace {

constexpr uint64_t kAlign = 64;

// Allocates or fails the test: keeps the scenario tests short.
Allocation MustAllocate(OffsetAllocator& alloc, uint64_t size) {
  std::optional<Allocation> a = alloc.Allocate(size);
  EXPECT_TRUE(a.has_value()) << "size " << size;
  return a ? std::move(*a) : Allocation();
}

TEST(OffsetAllocatorTest, CapacityRoundedDownToAlignment) {
  auto alloc = OffsetAllocator::Create(1000, 64);
  EXPECT_EQ(alloc->capacity(), 960u);
  EXPECT_EQ(alloc->alignment(), 64u);
  EXPECT_EQ(alloc->used(), 0u);
  EXPECT_EQ(alloc->largest_free(), 960u);
  EXPECT_EQ(alloc->free_ranges(), 1u);
}

TEST(OffsetAllocatorTest, CapacityBelowAlignmentIsEmpty) {
  auto alloc = OffsetAllocator::Create(63, 64);
  EXPECT_EQ(alloc->capacity(), 0u);
  EXPECT_EQ(alloc->largest_free(), 0u);
  EXPECT_EQ(alloc->free_ranges(), 0u);
  EXPECT_FALSE(alloc->Allocate(1).has_value());
}

TEST(OffsetAllocatorTest, SizesAndOffsetsAligned) {
  auto alloc = OffsetAllocator::Create(1 << 20, kAlign);
  Allocation a = MustAllocate(*alloc, 1);
  EXPECT_EQ(a.offset(), 0u);
  EXPECT_EQ(a.size(), kAlign);
  Allocation b = MustAllocate(*alloc, kAlign + 1);
  EXPECT_EQ(b.offset(), kAlign);
  EXPECT_EQ(b.size(), 2 * kAlign);
  Allocation c = MustAllocate(*alloc, kAlign);
  EXPECT_EQ(c.offset(), 3 * kAlign);
  EXPECT_EQ(c.size(), kAlign);
  EXPECT_EQ(alloc->used(), 4 * kAlign);
}

TEST(OffsetAllocatorTest, LargeAlignment) {
  auto alloc = OffsetAllocator::Create(64 * 4096, 4096);
  for (uint64_t size : {uint64_t{1}, uint64_t{4095}, uint64_t{4096}, uint64_t{4097}}) {
    Allocation a = MustAllocate(*alloc, size);
    EXPECT_EQ(a.offset() % 4096, 0u);
    EXPECT_EQ(a.size(), (size + 4095) / 4096 * 4096);
  }
  EXPECT_EQ(alloc->used(), 0u);  // all freed at the end of each iteration
}

TEST(OffsetAllocatorTest, ZeroAndOverCapacityRequestsFail) {
  auto alloc = OffsetAllocator::Create(64 * kAlign, kAlign);
  EXPECT_FALSE(alloc->Allocate(0).has_value());
  EXPECT_FALSE(alloc->Allocate(alloc->capacity() + 1).has_value());
  EXPECT_FALSE(alloc->Allocate(std::numeric_limits<uint64_t>::max()).has_value());
  EXPECT_FALSE(alloc->Allocate(std::numeric_limits<uint64_t>::max() - kAlign + 2).has_value());
  EXPECT_EQ(alloc->used(), 0u);
  EXPECT_EQ(alloc->free_ranges(), 1u);
  Allocation all = MustAllocate(*alloc, alloc->capacity());
  EXPECT_EQ(all.offset(), 0u);
  EXPECT_EQ(all.size(), alloc->capacity());
}

TEST(OffsetAllocatorTest, FullSegmentFailsCleanly) {
  auto alloc = OffsetAllocator::Create(16 * kAlign, kAlign);
  std::vector<Allocation> held;
  for (int i = 0; i < 16; ++i) held.push_back(MustAllocate(*alloc, kAlign));
  EXPECT_EQ(alloc->used(), alloc->capacity());
  EXPECT_EQ(alloc->largest_free(), 0u);
  EXPECT_EQ(alloc->free_ranges(), 0u);
  EXPECT_FALSE(alloc->Allocate(1).has_value());
  EXPECT_FALSE(alloc->Allocate(kAlign).has_value());
  // A failed request changed nothing.
  EXPECT_EQ(alloc->used(), alloc->capacity());
  const uint64_t freed_offset = held[5].offset();
  held[5].Reset();
  Allocation again = MustAllocate(*alloc, kAlign);
  EXPECT_EQ(again.offset(), freed_offset);
  EXPECT_EQ(alloc->used(), alloc->capacity());
}

TEST(OffsetAllocatorTest, HandleDestructionFrees) {
  auto alloc = OffsetAllocator::Create(16 * kAlign, kAlign);
  {
    Allocation a = MustAllocate(*alloc, 10 * kAlign);
    EXPECT_TRUE(a.valid());
    EXPECT_EQ(alloc->used(), 10 * kAlign);
  }
  EXPECT_EQ(alloc->used(), 0u);
  EXPECT_EQ(alloc->largest_free(), alloc->capacity());
  // Reuse of the same space after RAII release.
  Allocation b = MustAllocate(*alloc, 16 * kAlign);
  EXPECT_EQ(b.offset(), 0u);
}

TEST(OffsetAllocatorTest, ResetIsIdempotent) {
  auto alloc = OffsetAllocator::Create(16 * kAlign, kAlign);
  Allocation a = MustAllocate(*alloc, kAlign);
  a.Reset();
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(alloc->used(), 0u);
  a.Reset();
  EXPECT_EQ(alloc->used(), 0u);
  Allocation empty;
  EXPECT_FALSE(empty.valid());
  empty.Reset();
}

TEST(OffsetAllocatorTest, MoveConstructionTransfersOwnership) {
  auto alloc = OffsetAllocator::Create(16 * kAlign, kAlign);
  Allocation a = MustAllocate(*alloc, 3 * kAlign);
  const uint64_t offset = a.offset();
  Allocation b(std::move(a));
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move): checking moved-from state
  EXPECT_TRUE(b.valid());
  EXPECT_EQ(b.offset(), offset);
  EXPECT_EQ(b.size(), 3 * kAlign);
  a.Reset();  // moved-from: must not free b's range
  EXPECT_EQ(alloc->used(), 3 * kAlign);
  { Allocation c(std::move(b)); }
  EXPECT_EQ(alloc->used(), 0u);
  EXPECT_EQ(alloc->free_ranges(), 1u);
}

TEST(OffsetAllocatorTest, MoveAssignmentFreesTargetOnce) {
  auto alloc = OffsetAllocator::Create(16 * kAlign, kAlign);
  Allocation a = MustAllocate(*alloc, 2 * kAlign);
  Allocation b = MustAllocate(*alloc, 5 * kAlign);
  EXPECT_EQ(alloc->used(), 7 * kAlign);
  b = std::move(a);  // b's old range is released, a's moves into b
  EXPECT_EQ(alloc->used(), 2 * kAlign);
  EXPECT_FALSE(a.valid());  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(b.size(), 2 * kAlign);
  Allocation& alias = b;
  b = std::move(alias);  // self-move keeps the range
  EXPECT_TRUE(b.valid());
  EXPECT_EQ(alloc->used(), 2 * kAlign);
  std::vector<Allocation> v;
  v.push_back(std::move(b));
  v.reserve(64);  // relocation moves handles; nothing may be freed twice
  EXPECT_EQ(alloc->used(), 2 * kAlign);
  v.clear();
  EXPECT_EQ(alloc->used(), 0u);
  EXPECT_EQ(alloc->free_ranges(), 1u);
}

// Sees the frees of an allocator, and outlives it only as long as someone else holds it.
class RecordingFence : public FreeFence {
 public:
  uint64_t OnFree(uint64_t offset, uint64_t size) override {
    freed.emplace_back(offset, size);
    return 0;
  }
  std::vector<std::pair<uint64_t, uint64_t>> freed;
};

TEST(OffsetAllocatorTest, HandleKeepsAllocatorAlive) {
  auto alloc = OffsetAllocator::Create(16 * kAlign, kAlign);
  auto fence = std::make_shared<RecordingFence>();
  std::weak_ptr<RecordingFence> fence_alive = fence;
  RecordingFence* seen = fence.get();
  alloc->SetFence(std::move(fence));  // the allocator owns it now: it lives as long
  Allocation a = MustAllocate(*alloc, kAlign);
  Allocation b = MustAllocate(*alloc, kAlign);
  alloc.reset();  // e.g. the segment was unmounted while readers still hold handles
  EXPECT_FALSE(fence_alive.expired());
  EXPECT_EQ(b.owner()->used(), 2 * kAlign);
  b.Reset();  // frees into the allocator, which stays for `a`
  EXPECT_FALSE(fence_alive.expired());
  ASSERT_EQ(seen->freed.size(), 1u);
  EXPECT_EQ(seen->freed[0].second, kAlign);
  a.Reset();  // frees into the allocator, then drops its last reference: it is deleted
  EXPECT_TRUE(fence_alive.expired());
}

TEST(OffsetAllocatorTest, TheSharedOwnersAloneDeleteAnAllocatorWithoutHandles) {
  auto alloc = OffsetAllocator::Create(16 * kAlign, kAlign);
  auto fence = std::make_shared<RecordingFence>();
  std::weak_ptr<RecordingFence> fence_alive = fence;
  alloc->SetFence(std::move(fence));
  { Allocation gone = MustAllocate(*alloc, kAlign); }
  auto copy = alloc;
  alloc.reset();
  EXPECT_FALSE(fence_alive.expired());  // `copy` still holds it
  copy.reset();
  EXPECT_TRUE(fence_alive.expired());
}

TEST(OffsetAllocatorTest, CoalescesNeighbours) {
  auto alloc = OffsetAllocator::Create(16 * kAlign, kAlign);
  Allocation a = MustAllocate(*alloc, 4 * kAlign);
  Allocation b = MustAllocate(*alloc, 4 * kAlign);
  Allocation c = MustAllocate(*alloc, 4 * kAlign);
  Allocation d = MustAllocate(*alloc, 4 * kAlign);
  EXPECT_EQ(alloc->free_ranges(), 0u);
  b.Reset();  // middle
  EXPECT_EQ(alloc->free_ranges(), 1u);
  EXPECT_EQ(alloc->largest_free(), 4 * kAlign);
  d.Reset();  // not adjacent to b
  EXPECT_EQ(alloc->free_ranges(), 2u);
  c.Reset();  // joins b and d on both sides
  EXPECT_EQ(alloc->free_ranges(), 1u);
  EXPECT_EQ(alloc->largest_free(), 12 * kAlign);
  a.Reset();  // joins the range after it
  EXPECT_EQ(alloc->free_ranges(), 1u);
  EXPECT_EQ(alloc->largest_free(), alloc->capacity());
  EXPECT_EQ(alloc->used(), 0u);
}

TEST(OffsetAllocatorTest, CoalescesWithPreviousOnly) {
  auto alloc = OffsetAllocator::Create(16 * kAlign, kAlign);
  Allocation a = MustAllocate(*alloc, 4 * kAlign);
  Allocation b = MustAllocate(*alloc, 4 * kAlign);
  Allocation rest = MustAllocate(*alloc, 8 * kAlign);
  a.Reset();
  b.Reset();  // merges with a (before), rest still held
  EXPECT_EQ(alloc->free_ranges(), 1u);
  EXPECT_EQ(alloc->largest_free(), 8 * kAlign);
  Allocation whole = MustAllocate(*alloc, 8 * kAlign);
  EXPECT_EQ(whole.offset(), 0u);
}

TEST(OffsetAllocatorTest, FragmentationThenCoalescing) {
  auto alloc = OffsetAllocator::Create(8 * kAlign, kAlign);
  std::vector<Allocation> blocks;
  for (int i = 0; i < 8; ++i) blocks.push_back(MustAllocate(*alloc, kAlign));
  for (int i = 0; i < 8; i += 2) blocks[i].Reset();  // holes at 0, 2, 4, 6
  EXPECT_EQ(alloc->free_ranges(), 4u);
  EXPECT_EQ(alloc->largest_free(), kAlign);
  EXPECT_EQ(alloc->capacity() - alloc->used(), 4 * kAlign);  // enough in total...
  EXPECT_FALSE(alloc->Allocate(2 * kAlign).has_value());     // ...but no hole fits
  blocks[1].Reset();                                         // holes 0..2 merge into one of 3 units
  EXPECT_EQ(alloc->free_ranges(), 3u);
  EXPECT_EQ(alloc->largest_free(), 3 * kAlign);
  Allocation two = MustAllocate(*alloc, 2 * kAlign);
  EXPECT_EQ(two.offset(), 0u);
}

TEST(OffsetAllocatorTest, BestFitPrefersSmallestHole) {
  auto alloc = OffsetAllocator::Create(16 * kAlign, kAlign);
  Allocation big_hole = MustAllocate(*alloc, 4 * kAlign);    // [0, 4)
  Allocation sep1 = MustAllocate(*alloc, 1 * kAlign);        // [4, 5)
  Allocation small_hole = MustAllocate(*alloc, 2 * kAlign);  // [5, 7)
  Allocation sep2 = MustAllocate(*alloc, 1 * kAlign);        // [7, 8)
  Allocation tail = MustAllocate(*alloc, 8 * kAlign);        // [8, 16)
  big_hole.Reset();
  small_hole.Reset();
  // The first hole by offset is the big one; best fit must take the small one.
  Allocation two = MustAllocate(*alloc, 2 * kAlign);
  EXPECT_EQ(two.offset(), 5 * kAlign);
  Allocation three = MustAllocate(*alloc, 3 * kAlign);
  EXPECT_EQ(three.offset(), 0u);
  EXPECT_EQ(alloc->largest_free(), kAlign);
}

// Reference model: one flag per alignment unit.
class BitmapModel {
 public:
  explicit BitmapModel(uint64_t units) : used_(units, false) {}
  bool RangeFree(uint64_t first, uint64_t count) const {
    for (uint64_t i = first; i < first + count; ++i) {
      if (used_[i]) return false;
    }
    return true;
  }
  void Set(uint64_t first, uint64_t count, bool value) {
    for (uint64_t i = first; i < first + count; ++i) used_[i] = value;
  }
  // Free runs: count and longest, in units.
  std::pair<size_t, uint64_t> FreeRuns() const {
    size_t runs = 0;
    uint64_t longest = 0;
    uint64_t current = 0;
    for (bool u : used_) {
      if (!u) {
        if (current++ == 0) ++runs;
        longest = std::max(longest, current);
      } else {
        current = 0;
      }
    }
    return {runs, longest};
  }

 private:
  std::vector<bool> used_;
};

TEST(OffsetAllocatorTest, RandomizedAgainstBitmapModel) {
  constexpr uint64_t kUnits = 4096;
  auto alloc = OffsetAllocator::Create(kUnits * kAlign, kAlign);
  BitmapModel model(kUnits);
  std::vector<Allocation> live;
  uint64_t expected_used = 0;
  std::mt19937_64 rng(12345);
  int successes = 0;
  int failures = 0;
  for (int op = 0; op < 8000; ++op) {
    const bool do_alloc = live.empty() || rng() % 100 < 55;
    if (do_alloc) {
      // Mostly small, sometimes large requests, unaligned sizes.
      const uint64_t max_size = rng() % 10 == 0 ? kUnits * kAlign / 4 : 16 * kAlign;
      const uint64_t size = 1 + rng() % max_size;
      const uint64_t units = (size + kAlign - 1) / kAlign;
      std::optional<Allocation> a = alloc->Allocate(size);
      if (!a) {
        ++failures;
        // Best fit over fully coalesced ranges fails only when no run fits.
        ASSERT_LT(model.FreeRuns().second, units) << "op " << op;
        continue;
      }
      ++successes;
      ASSERT_EQ(a->offset() % kAlign, 0u);
      ASSERT_EQ(a->size(), units * kAlign);
      ASSERT_LE(a->offset() + a->size(), alloc->capacity());
      ASSERT_TRUE(model.RangeFree(a->offset() / kAlign, units)) << "overlap at op " << op;
      model.Set(a->offset() / kAlign, units, true);
      expected_used += a->size();
      live.push_back(std::move(*a));
    } else {
      const size_t victim = rng() % live.size();
      model.Set(live[victim].offset() / kAlign, live[victim].size() / kAlign, false);
      expected_used -= live[victim].size();
      std::swap(live[victim], live.back());
      live.pop_back();
    }
    ASSERT_EQ(alloc->used(), expected_used) << "op " << op;
    const auto [runs, longest] = model.FreeRuns();
    ASSERT_EQ(alloc->free_ranges(), runs) << "op " << op;
    ASSERT_EQ(alloc->largest_free(), longest * kAlign) << "op " << op;
  }
  EXPECT_GT(successes, 1000);
  EXPECT_GT(failures, 0);  // the scenario did reach full/fragmented states
  live.clear();
  EXPECT_EQ(alloc->used(), 0u);
  EXPECT_EQ(alloc->free_ranges(), 1u);
  EXPECT_EQ(alloc->largest_free(), alloc->capacity());
}

TEST(OffsetAllocatorTest, ConcurrentAllocateFree) {
  constexpr uint64_t kUnits = 2048;
  constexpr int kThreads = 4;
  constexpr int kOpsPerThread = 4000;
  auto alloc = OffsetAllocator::Create(kUnits * kAlign, kAlign);
  // Owner of each unit: a thread claims its units after allocating; a clash is an overlap.
  std::vector<std::atomic<int>> owner(kUnits);
  for (auto& o : owner) o.store(0);
  std::atomic<int> overlaps{0};
  std::atomic<int> successes{0};
  std::vector<std::thread> threads;
  for (int t = 1; t <= kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(t);
      std::vector<Allocation> mine;
      auto release = [&](Allocation& a) {
        for (uint64_t u = a.offset() / kAlign; u < (a.offset() + a.size()) / kAlign; ++u) {
          int expected = t;
          if (!owner[u].compare_exchange_strong(expected, 0)) overlaps.fetch_add(1);
        }
        a.Reset();
      };
      for (int op = 0; op < kOpsPerThread; ++op) {
        if (mine.empty() || rng() % 2 == 0) {
          std::optional<Allocation> a = alloc->Allocate(1 + rng() % (32 * kAlign));
          if (!a) continue;
          successes.fetch_add(1);
          for (uint64_t u = a->offset() / kAlign; u < (a->offset() + a->size()) / kAlign; ++u) {
            int expected = 0;
            if (!owner[u].compare_exchange_strong(expected, t)) overlaps.fetch_add(1);
          }
          mine.push_back(std::move(*a));
        } else {
          const size_t victim = rng() % mine.size();
          release(mine[victim]);
          std::swap(mine[victim], mine.back());
          mine.pop_back();
        }
      }
      for (auto& a : mine) release(a);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GT(successes.load(), kThreads * kOpsPerThread / 4);
  EXPECT_EQ(alloc->used(), 0u);
  EXPECT_EQ(alloc->free_ranges(), 1u);
  EXPECT_EQ(alloc->largest_free(), alloc->capacity());
}

}  // namespace
}  // namespace tierkv
