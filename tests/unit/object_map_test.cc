// ObjectMap: the object table's per-shard map (dense entries found through an index of entry
// numbers). Checked against std::map as a model over random inserts and erases.
#include "master/object_map.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <memory>
#include <random>
#include <string>

#include "memory/offset_allocator.h"

namespace tierkv {
namespace {

std::string KeyOf(uint64_t i) { return "tenant/model/block-" + std::to_string(i * 7919); }

ObjectMeta MetaOf(uint64_t i) {
  ObjectMeta m;
  m.size = i;
  m.checksum = i * 31;
  return m;
}

TEST(ObjectMapTest, FindsWhatItHoldsAndNothingElse) {
  ObjectMap map;
  EXPECT_TRUE(map.empty());
  EXPECT_EQ(map.begin(), map.end());
  auto [it, inserted] = map.emplace("a", MetaOf(1));
  EXPECT_TRUE(inserted);
  EXPECT_EQ(it->first.view(), "a");
  EXPECT_EQ(it->first.hash(), HashKey("a"));
  EXPECT_EQ(it->second.size, 1u);
  // A second emplace of the same key keeps the first metadata.
  auto [again, inserted_again] = map.emplace("a", MetaOf(2));
  EXPECT_FALSE(inserted_again);
  EXPECT_EQ(again, it);
  EXPECT_EQ(again->second.size, 1u);
  // The empty key is a key like any other.
  EXPECT_TRUE(map.emplace("", MetaOf(3)).second);
  EXPECT_EQ(map.size(), 2u);
  EXPECT_TRUE(map.contains(""));
  EXPECT_EQ(map.find("")->second.size, 3u);
  EXPECT_FALSE(map.contains("b"));
  EXPECT_EQ(map.find("b"), map.end());
  // Same hash, different bytes: not found.
  EXPECT_EQ(map.find(HashedKey{"b", HashKey("a")}), map.end());
}

TEST(ObjectMapTest, MatchesAModelOverRandomInsertsAndErases) {
  ObjectMap map;
  std::map<std::string, uint64_t> model;
  std::mt19937_64 rng(7);
  for (int step = 0; step < 60000; ++step) {
    const uint64_t i = rng() % 5000;
    const std::string key = KeyOf(i);
    if (rng() % 3 == 0) {
      auto it = map.find(key);
      ASSERT_EQ(it != map.end(), model.count(key) == 1) << key;
      if (it != map.end()) {
        map.erase(it);
        model.erase(key);
      }
    } else {
      const bool inserted = map.emplace(key, MetaOf(step)).second;
      ASSERT_EQ(inserted, model.emplace(key, step).second) << key;
    }
    ASSERT_EQ(map.size(), model.size());
  }
  for (const auto& [key, size] : model) {
    auto it = map.find(key);
    ASSERT_NE(it, map.end()) << key;
    EXPECT_EQ(it->second.size, size);
    EXPECT_EQ(it->first.view(), key);
  }
  // Iteration visits every entry once.
  std::map<std::string, uint64_t> seen;
  for (const auto& [key, meta] : map) {
    EXPECT_TRUE(seen.emplace(std::string(key.view()), meta.size).second);
  }
  EXPECT_EQ(seen, model);
}

TEST(ObjectMapTest, ErasingDuringIterationKeepsTheNextIteratorValid) {
  ObjectMap map;
  for (uint64_t i = 0; i < 3000; ++i) map.emplace(KeyOf(i), MetaOf(i));
  // Erase every even-sized entry while walking, as EraseWhere does.
  for (auto it = map.begin(); it != map.end();) {
    auto next = std::next(it);
    if (it->second.size % 2 == 0) map.erase(it);
    it = next;
  }
  EXPECT_EQ(map.size(), 1500u);
  for (uint64_t i = 0; i < 3000; ++i) EXPECT_EQ(map.contains(KeyOf(i)), i % 2 == 1) << i;
  // Erased entries are reused; the others keep their addresses.
  const ObjectEntry* kept = &*map.find(KeyOf(1));
  for (uint64_t i = 3000; i < 4500; ++i) map.emplace(KeyOf(i), MetaOf(i));
  EXPECT_EQ(&*map.find(KeyOf(1)), kept);
  EXPECT_EQ(map.size(), 3000u);
}

TEST(ObjectMapTest, ResumesAWalkFromAnEntryNumber) {
  ObjectMap map;
  for (uint64_t i = 0; i < 100; ++i) map.emplace(KeyOf(i), MetaOf(i));
  auto it = map.begin();
  for (int k = 0; k < 40; ++k) ++it;
  const uint32_t cursor = it.number();
  map.erase(map.find(std::string(it->first.view())));
  // The entry the cursor named is gone: the walk resumes at the next one.
  auto resumed = map.from(cursor);
  ASSERT_NE(resumed, map.end());
  EXPECT_GT(resumed.number(), cursor);
  size_t rest = 0;
  for (; resumed != map.end(); ++resumed) ++rest;
  EXPECT_EQ(rest, 59u);
  EXPECT_EQ(map.from(ObjectMap::kNone - 1), map.end());
}

TEST(ObjectMapTest, ErasingTheLastEntryGivesItsMemoryBack) {
  ObjectMap map;
  for (uint64_t i = 0; i < 2000; ++i) map.emplace(KeyOf(i), MetaOf(i));
  while (!map.empty()) map.erase(map.begin());
  EXPECT_EQ(map.begin(), map.end());
  EXPECT_EQ(map.from(5), map.end());
  // And it is usable again.
  EXPECT_TRUE(map.emplace("x", MetaOf(9)).second);
  EXPECT_EQ(map.begin().number(), 0u);
  EXPECT_EQ(map.find("x")->second.size, 9u);
}

TEST(ObjectMapTest, PrefetchesAreHarmlessForPresentAndAbsentKeys) {
  ObjectMap map;
  map.PrefetchIndex(HashKey("a"));
  map.PrefetchEntry(HashKey("a"), ObjectMap::EntryReads::kLease);
  map.PrefetchEntry(HashKey("a"), ObjectMap::EntryReads::kReplicas);
  map.PrefetchKey(HashKey("a"));
  for (uint64_t i = 0; i < 1000; ++i) map.emplace(KeyOf(i), MetaOf(i));
  for (uint64_t i = 0; i < 2000; ++i) {
    const uint64_t h = HashKey(KeyOf(i));
    map.PrefetchIndex(h);
    map.PrefetchEntry(h, ObjectMap::EntryReads::kReplicas);
    map.PrefetchKey(h);
  }
  EXPECT_EQ(map.size(), 1000u);
}

// The rare fields (soft-pin deadline, promotion id, pending upsert) read back what was set,
// through moves of the metadata, and read as their defaults once cleared, in any order.
// The state, seven flags and two counters share 8 bytes: each reads back what was written,
// whatever the others hold, up to the counters' maxima (what the promotion threshold needs).
TEST(ObjectMetaTest, FlagsAndCountersInTheFirstWordDoNotOverlap) {
  static_assert(ObjectMeta::kMaxDiskHits >= (uint32_t{1} << 20), "promote_min_hits' range");
  for (const bool on : {true, false}) {
    ObjectMeta m;
    m.state = on ? ObjectState::kComplete : ObjectState::kPending;
    m.soft_pin = on;
    m.hard_pin = !on;
    m.demoting = on;
    m.confirm_all = !on;
    m.reuse_tail = on;
    m.recovered = !on;
    m.leased = on;
    m.disk_hits = on ? ObjectMeta::kMaxDiskHits : 1;
    m.reuse_references = on ? 1 : ObjectMeta::kMaxReuseReferences;
    EXPECT_EQ(m.state, on ? ObjectState::kComplete : ObjectState::kPending);
    EXPECT_EQ(m.soft_pin, on);
    EXPECT_EQ(m.hard_pin, !on);
    EXPECT_EQ(m.demoting, on);
    EXPECT_EQ(m.confirm_all, !on);
    EXPECT_EQ(m.reuse_tail, on);
    EXPECT_EQ(m.recovered, !on);
    EXPECT_EQ(m.leased, on);
    EXPECT_EQ(m.disk_hits, on ? ObjectMeta::kMaxDiskHits : 1u);
    EXPECT_EQ(m.reuse_references, on ? 1u : ObjectMeta::kMaxReuseReferences);
    EXPECT_EQ(m.last_access, SteadyTime{});
  }
}

TEST(ObjectMetaTest, RareFieldsReadBackUntilClearedInAnyOrder) {
  ObjectMeta m;
  EXPECT_EQ(m.soft_pin_until(), SteadyTime{});
  EXPECT_EQ(m.promotion_id(), 0u);
  EXPECT_EQ(m.next(), nullptr);
  EXPECT_EQ(m.take_next(), nullptr);
  m.set_soft_pin_until(SteadyTime{} + std::chrono::seconds(5));
  m.set_promotion_id(7);
  auto version = std::make_unique<PendingVersion>();
  version->put_id = 11;
  m.set_next(std::move(version));
  ObjectMeta moved = std::move(m);
  EXPECT_EQ(moved.soft_pin_until(), SteadyTime{} + std::chrono::seconds(5));
  EXPECT_EQ(moved.promotion_id(), 7u);
  ASSERT_NE(moved.next(), nullptr);
  EXPECT_EQ(moved.next()->put_id, 11u);
  // Clearing one leaves the others.
  moved.set_soft_pin_until(SteadyTime{});
  EXPECT_EQ(moved.promotion_id(), 7u);
  ASSERT_NE(moved.next(), nullptr);
  auto taken = moved.take_next();
  ASSERT_NE(taken, nullptr);
  EXPECT_EQ(taken->put_id, 11u);
  EXPECT_EQ(moved.next(), nullptr);
  EXPECT_EQ(moved.promotion_id(), 7u);
  moved.set_promotion_id(0);
  EXPECT_EQ(moved.promotion_id(), 0u);
  // Set again after everything was cleared.
  moved.set_next(std::make_unique<PendingVersion>());
  EXPECT_NE(moved.next(), nullptr);
  moved.set_next(nullptr);
  EXPECT_EQ(moved.next(), nullptr);
  EXPECT_EQ(moved.soft_pin_until(), SteadyTime{});
}

// The group shares the out-of-line block with the rare fields: it outlives their clearing,
// and they outlive its.
TEST(ObjectMetaTest, TheGroupReadsBackWhateverTheRareFieldsDo) {
  ObjectMeta m;
  EXPECT_EQ(m.group_id(), "");
  m.set_group_id("");  // ungrouped: nothing allocated, still ""
  EXPECT_EQ(m.group_id(), "");
  m.set_group_id("group-a");
  m.set_promotion_id(3);
  m.set_promotion_id(0);
  EXPECT_EQ(m.group_id(), "group-a");
  m.set_next(std::make_unique<PendingVersion>());
  m.set_group_id("");
  EXPECT_EQ(m.group_id(), "");
  EXPECT_NE(m.next(), nullptr);
  m.set_group_id(std::string(300, 'g'));  // a long name, as a key may be
  auto taken = m.take_next();
  ObjectMeta moved = std::move(m);
  EXPECT_EQ(moved.group_id(), std::string(300, 'g'));
  EXPECT_EQ(moved.next(), nullptr);
}

// A Replica holds its allocation or its disk location in one place, by tier: moves between
// tiers free what was there and keep what comes.
TEST(ReplicaTest, HoldsTheAllocationOrTheDiskLocationOfItsTierThroughMoves) {
  auto allocator = OffsetAllocator::Create(1 << 20);
  auto at = allocator->AllocateAt(4096, 1000);
  ASSERT_TRUE(at.has_value());
  Replica memory(7, ReplicaTier::kMemory, std::move(*at));
  EXPECT_EQ(memory.memory_offset(), 4096u);
  EXPECT_EQ(memory.disk_location().generation, 0u);
  const uint64_t used = allocator->used();
  EXPECT_GT(used, 0u);

  DiskLocation where{3, 9, 8192, 1000};
  Replica disk(8, ReplicaTier::kDisk, Allocation(), where);
  EXPECT_EQ(disk.memory_offset(), 0u);
  EXPECT_EQ(disk.disk_location().region, 3u);
  EXPECT_EQ(disk.disk_location().generation, 9u);

  ReplicaList list;
  list.push_back(std::move(memory));
  list.push_back(std::move(disk));  // the inline one moves to the heap with it
  EXPECT_EQ(list[0].memory_offset(), 4096u);
  EXPECT_EQ(list[1].disk_location().offset, 8192u);
  EXPECT_EQ(list[1].disk_location().size, 1000u);
  EXPECT_EQ(allocator->used(), used);  // moved, not freed
  // A disk replica assigned over the memory one frees its range.
  list[0] = std::move(list[1]);
  EXPECT_EQ(allocator->used(), 0u);
  EXPECT_EQ(list[0].tier, ReplicaTier::kDisk);
  EXPECT_EQ(list[0].disk_location().generation, 9u);
  // And a memory replica assigned over a disk one holds its range.
  auto again = allocator->AllocateAt(0, 500);
  ASSERT_TRUE(again.has_value());
  list[1] = Replica(7, ReplicaTier::kMemory, std::move(*again));
  EXPECT_GT(allocator->used(), 0u);
  EXPECT_EQ(EraseReplicasIf(list, [](const Replica& r) { return r.tier == ReplicaTier::kMemory; }),
            1u);
  EXPECT_EQ(allocator->used(), 0u);
  EXPECT_EQ(list.size(), 1u);
}

// A disk location is kept in 24 bytes (its offset in 4 KiB pages): every one that fits comes
// back exact, and the ones that do not are named so that no path adds them.
TEST(ReplicaTest, KeepsEveryDiskLocationThatFitsExactlyAndSaysWhichDoNot) {
  const uint64_t kLastPage = uint64_t{UINT32_MAX} << 12;
  for (const DiskLocation& d :
       {DiskLocation{0, 1, 0, 1}, DiskLocation{UINT32_MAX, UINT64_MAX, kLastPage, UINT64_MAX},
        DiskLocation{5, uint64_t{1} << 40, 123 * 4096, (uint64_t{5} << 32) + 7}}) {
    ASSERT_TRUE(DiskLocationFits(d));
    Replica r(1, ReplicaTier::kDisk, Allocation(), d);
    const DiskLocation back = r.disk_location();
    EXPECT_EQ(back.region, d.region);
    EXPECT_EQ(back.generation, d.generation);
    EXPECT_EQ(back.offset, d.offset);
    EXPECT_EQ(back.size, d.size);
  }
  EXPECT_FALSE(DiskLocationFits(DiskLocation{0, 1, 4097, 10}));              // off a page
  EXPECT_FALSE(DiskLocationFits(DiskLocation{0, 1, kLastPage + 4096, 10}));  // past 16 TiB
}

}  // namespace
}  // namespace tierkv
