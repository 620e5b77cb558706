// ReplicaList: one replica inline, more in a heap block, no size word of its own. Checked
// against a plain model (the segments in order) through random pushes, erases and moves, with
// memory replicas that own allocations: every range is freed exactly once (the allocator's
// `used` and ASan/UBSan in CI).
#include <gtest/gtest.h>

#include <random>
#include <utility>
#include <vector>

#include "master/object_meta.h"

namespace tierkv {
namespace {

std::vector<SegmentId> Segments(const ReplicaList& list) {
  std::vector<SegmentId> out;
  for (const Replica& r : list) out.push_back(r.segment);
  return out;
}

TEST(ReplicaListTest, IsOneReplicaWideAndKeepsOneInline) {
  static_assert(sizeof(ReplicaList) == sizeof(Replica));
  auto allocator = OffsetAllocator::Create(1 << 20);
  ReplicaList list;
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(list.begin(), list.end());
  auto a = allocator->Allocate(100);
  ASSERT_TRUE(a.has_value());
  list.push_back(Replica(1, ReplicaTier::kMemory, std::move(*a)));
  ASSERT_EQ(list.size(), 1u);
  // Inline: the replica lies inside the list itself.
  const auto* inside = reinterpret_cast<const unsigned char*>(&list);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(&list.front()), inside);
  list.push_back(Replica(2, ReplicaTier::kDisk, Allocation(), DiskLocation{1, 2, 4096, 100}));
  list.push_back(Replica(3, ReplicaTier::kDisk, Allocation(), DiskLocation{1, 3, 8192, 100}));
  EXPECT_EQ(Segments(list), (std::vector<SegmentId>{1, 2, 3}));
  EXPECT_NE(reinterpret_cast<const unsigned char*>(&list.front()), inside);
  EXPECT_EQ(list[2].disk_location().offset, 8192u);
  // Back to one: inline again, the same replica.
  EXPECT_EQ(EraseReplicasIf(list, [](const Replica& r) { return r.tier == ReplicaTier::kDisk; }),
            2u);
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(reinterpret_cast<const unsigned char*>(&list.front()), inside);
  EXPECT_EQ(list.front().segment, 1u);
  EXPECT_GT(allocator->used(), 0u);
  list.clear();
  EXPECT_TRUE(list.empty());
  EXPECT_EQ(allocator->used(), 0u);
}

TEST(ReplicaListTest, MovesLeaveTheSourceEmptyAndFreeNothing) {
  auto allocator = OffsetAllocator::Create(1 << 20);
  for (const int n : {0, 1, 2, 5}) {
    SCOPED_TRACE(n);
    ReplicaList list;
    for (int i = 0; i < n; ++i) {
      list.push_back(Replica(static_cast<SegmentId>(i), ReplicaTier::kMemory,
                             std::move(*allocator->Allocate(64))));
    }
    const uint64_t used = allocator->used();
    ReplicaList moved(std::move(list));
    EXPECT_TRUE(list.empty());  // NOLINT(bugprone-use-after-move): a moved-from list is empty
    EXPECT_EQ(moved.size(), static_cast<size_t>(n));
    ReplicaList assigned;
    assigned.push_back(Replica(99, ReplicaTier::kMemory, std::move(*allocator->Allocate(64))));
    assigned = std::move(moved);  // frees segment 99's range, keeps the n
    EXPECT_EQ(assigned.size(), static_cast<size_t>(n));
    EXPECT_EQ(allocator->used(), used);
    std::vector<ReplicaList> many;
    many.push_back(std::move(assigned));
    for (int i = 0; i < 20; ++i) many.emplace_back();  // growth moves the lists
    EXPECT_EQ(many[0].size(), static_cast<size_t>(n));
  }
  EXPECT_EQ(allocator->used(), 0u);
}

TEST(ReplicaListTest, RandomPushesAndErasesMatchAModel) {
  auto allocator = OffsetAllocator::Create(64 << 20);
  std::mt19937 rng(42);
  std::vector<ReplicaList> lists(8);
  std::vector<std::vector<SegmentId>> model(8);
  SegmentId next = 1;
  for (int step = 0; step < 20000; ++step) {
    const size_t i = rng() % lists.size();
    const uint32_t op = rng() % 10;
    if (op < 5 && model[i].size() < 6) {
      const SegmentId s = next++;
      if (rng() % 2 == 0) {
        auto range = allocator->Allocate(64 + rng() % 4096);
        ASSERT_TRUE(range.has_value());
        lists[i].push_back(Replica(s, ReplicaTier::kMemory, std::move(*range)));
      } else {
        lists[i].push_back(
            Replica(s, ReplicaTier::kDisk, Allocation(), DiskLocation{s, s, 4096, 1}));
      }
      model[i].push_back(s);
    } else if (op < 8) {
      const uint32_t mod = 1 + rng() % 3;
      EraseReplicasIf(lists[i], [&](const Replica& r) { return r.segment % mod == 0; });
      std::erase_if(model[i], [&](SegmentId s) { return s % mod == 0; });
    } else if (op == 8) {
      const size_t j = rng() % lists.size();
      if (j != i) {
        lists[j] = std::move(lists[i]);
        model[j] = std::move(model[i]);
        model[i].clear();
      }
    } else {
      ReplicaList tmp(std::move(lists[i]));
      lists[i] = std::move(tmp);
    }
    ASSERT_EQ(Segments(lists[i]), model[i]) << "step " << step;
    for (const Replica& r : lists[i]) {
      if (r.tier == ReplicaTier::kDisk) {
        ASSERT_EQ(r.disk_location().generation, r.segment);
      }
    }
  }
  for (size_t i = 0; i < lists.size(); ++i) EXPECT_EQ(Segments(lists[i]), model[i]);
  lists.clear();
  EXPECT_EQ(allocator->used(), 0u);
}

}  // namespace
}  // namespace tierkv
