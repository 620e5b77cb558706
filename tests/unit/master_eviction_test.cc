// MasterService eviction: watermarks, what is never evicted, LRU order and
// custom policies. A ManualClock orders accesses; nothing sleeps.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/eviction_policy.h"
#include "master/master_service.h"
#include "size_units.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {
namespace {

constexpr uint64_t kEvictionCap = 10 * kMiB;
constexpr Millis kEvictionTtl{10000};

std::string EvictionKey(int i) { return "k" + std::to_string(i); }

class MasterEvictionTest : public ::testing::Test {
 protected:
  MasterOptions Options() {
    MasterOptions o;
    o.clock = &clock_;
    o.lease_ttl = kEvictionTtl;
    o.shards = 16;
    return o;
  }
  void Make(MasterOptions o, uint64_t capacity = kEvictionCap) {
    master_ = std::make_unique<MasterService>(std::move(o));
    auto seg = master_->MountSegment("seg", capacity);
    ASSERT_TRUE(seg.ok());
    seg_ = *seg;
  }
  void SetUp() override { Make(Options()); }

  uint64_t Used() const { return master_->segments().Find(seg_)->allocator->used(); }
  uint64_t Evicted() { return master_->Stats().evicted_objects; }

  // PutStart of one key; the clock then moves 1 ms so accesses are ordered.
  uint64_t Start(const std::string& key, uint64_t size = kMiB, ReplicateConfig cfg = {}) {
    auto r = master_->PutStart({key}, {size}, cfg);
    EXPECT_TRUE(r[0].ok()) << key << ": " << r[0].status().ToString();
    clock_.Advance(Millis(1));
    EXPECT_LE(Used(), kEvictionCap);
    return r[0].ok() ? r[0]->put_id : 0;
  }
  void End(const std::string& key, uint64_t put_id) {
    EXPECT_TRUE(master_->PutEnd({key}, {put_id}, {0})[0].ok()) << key;
  }
  void Put(const std::string& key, uint64_t size = kMiB, ReplicateConfig cfg = {}) {
    End(key, Start(key, size, std::move(cfg)));
  }
  // Exists() of many keys (grants leases: call it when that does not matter).
  std::vector<int> ExistsAll(const std::vector<std::string>& keys) { return master_->Exists(keys); }

  ManualClock clock_;
  std::unique_ptr<MasterService> master_;
  SegmentId seg_ = 0;
};

TEST_F(MasterEvictionTest, PassingHighWatermarkEvictsDownToLowMark) {
  // 9 MiB of 10 is exactly the 0.90 watermark: not past it.
  for (int i = 0; i < 9; ++i) Put(EvictionKey(i));
  EXPECT_EQ(Used(), 9 * kMiB);
  EXPECT_EQ(Evicted(), 0u);
  EXPECT_EQ(master_->EvictIfNeeded(), 0u);

  // The 10th passes it: PutStart evicts the two least recently used objects,
  // down to 0.85 or just below (whole objects only).
  const uint64_t id9 = Start(EvictionKey(9));
  const double low = (0.90 - 0.05) * static_cast<double>(kEvictionCap);
  EXPECT_LE(static_cast<double>(Used()), low);
  EXPECT_GT(static_cast<double>(Used()), low - static_cast<double>(kMiB));
  EXPECT_EQ(Used(), 8 * kMiB);
  MasterStats st = master_->Stats();
  EXPECT_EQ(st.evicted_objects, 2u);
  EXPECT_EQ(st.evicted_bytes, 2 * kMiB);
  EXPECT_EQ(st.objects, 8u);
  End(EvictionKey(9), id9);

  Put(EvictionKey(10));
  EXPECT_EQ(Evicted(), 2u);
  Put(EvictionKey(11));
  EXPECT_EQ(Evicted(), 4u);
  EXPECT_EQ(Used(), 8 * kMiB);

  std::vector<std::string> keys;
  for (int i = 0; i < 12; ++i) keys.push_back(EvictionKey(i));
  EXPECT_EQ(ExistsAll(keys), (std::vector<int>{0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
}

TEST_F(MasterEvictionTest, PutThatDoesNotFitEvictsThenSucceeds) {
  for (int i = 0; i < 10; ++i) Put(EvictionKey(i));
  ASSERT_EQ(Used(), 8 * kMiB);  // k0, k1 went at the watermark
  ASSERT_EQ(Evicted(), 2u);
  // 3 MiB do not fit in the 2 MiB left: eviction frees size + 5% of the
  // segment (3.5 MiB -> four 1 MiB objects), then the put goes through.
  Put("big", 3 * kMiB);
  EXPECT_EQ(Evicted(), 6u);
  EXPECT_EQ(Used(), 7 * kMiB);
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) keys.push_back(EvictionKey(i));
  keys.push_back("big");
  EXPECT_EQ(ExistsAll(keys), (std::vector<int>{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}));
}

TEST_F(MasterEvictionTest, FullSegmentWithoutWatermarkEvictsForPut) {
  MasterOptions o = Options();
  o.high_watermark = 1.0;  // the watermark never triggers
  Make(o);
  for (int i = 0; i < 10; ++i) Put(EvictionKey(i));
  EXPECT_EQ(Used(), kEvictionCap);
  EXPECT_EQ(Evicted(), 0u);
  Put(EvictionKey(10));
  EXPECT_EQ(Evicted(), 2u);  // 1 MiB + 0.5 MiB -> two objects
  EXPECT_EQ(Used(), 9 * kMiB);
  EXPECT_EQ(ExistsAll({EvictionKey(0), EvictionKey(1), EvictionKey(2), EvictionKey(10)}),
            (std::vector<int>{0, 0, 1, 1}));
}

// Evicted bytes need not be contiguous: a put keeps evicting (LRU order) until
// a hole large enough opens, instead of failing with space scattered around.
TEST_F(MasterEvictionTest, ScatteredFreeSpaceKeepsEvictingUntilThePutFits) {
  MasterOptions o = Options();
  o.high_watermark = 1.0;
  Make(o, kMiB);
  constexpr uint64_t k128 = 128 * 1024;
  for (int i = 0; i < 8; ++i) Put(EvictionKey(i), k128);
  // Touch the odd objects, then let their leases lapse: evens are least recent.
  std::vector<std::string> odd{EvictionKey(1), EvictionKey(3), EvictionKey(5), EvictionKey(7)};
  ExistsAll(odd);
  clock_.Advance(kEvictionTtl + Millis(1));
  auto r = master_->PutStart({"big"}, {2 * k128}, {});
  ASSERT_TRUE(r[0].ok()) << r[0].status().ToString();
  EXPECT_GE(Evicted(), 4u);  // the first round's holes (0, 2, 4) were not enough
  EXPECT_LE(Used(), kMiB);
}

TEST_F(MasterEvictionTest, NeverEvictsLeasedHardPinnedOrPending) {
  ReplicateConfig hard;
  hard.with_hard_pin = true;
  for (int i = 0; i < 3; ++i) {
    Put("L" + std::to_string(i));
    ASSERT_EQ(master_->Exists({"L" + std::to_string(i)}), std::vector<int>{1});
  }
  for (int i = 0; i < 3; ++i) Put("H" + std::to_string(i), kMiB, hard);
  Put("U0");
  Put("U1");
  const uint64_t p0 = Start("P0");
  const uint64_t p1 = Start("P1");  // 10 MiB: past the watermark
  // Only the two unpinned, unleased, complete objects were candidates.
  EXPECT_EQ(Evicted(), 2u);
  EXPECT_EQ(Used(), 8 * kMiB);
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 0u);
  // A put needing more than the free 2 MiB fails and evicts nothing.
  auto r = master_->PutStart({"big"}, {3 * kMiB}, {});
  EXPECT_EQ(r[0].code(), ErrorCode::NO_AVAILABLE_HANDLE);
  EXPECT_EQ(Evicted(), 2u);
  EXPECT_EQ(Used(), 8 * kMiB);
  EXPECT_EQ(master_->GetReplicas({"P0"})[0].code(), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(master_->GetReplicas({"P1"})[0].code(), ErrorCode::REPLICA_IS_NOT_READY);

  // Once the leases run out (and the leases the checks below take, too), the
  // leased objects are evictable; the hard-pinned and pending ones never are.
  clock_.Advance(kEvictionTtl + Millis(1));
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 3 * kMiB);
  EXPECT_EQ(Evicted(), 5u);
  End("P0", p0);
  End("P1", p1);
  EXPECT_EQ(ExistsAll({"L0", "L1", "L2", "H0", "H1", "H2", "U0", "U1", "P0", "P1"}),
            (std::vector<int>{0, 0, 0, 1, 1, 1, 0, 0, 1, 1}));
}

TEST_F(MasterEvictionTest, SoftPinnedEvictedOnlyAfterUnpinned) {
  ReplicateConfig soft;
  soft.with_soft_pin = true;
  for (int i = 0; i < 4; ++i) Put("S" + std::to_string(i), kMiB, soft);  // oldest
  for (int i = 0; i < 4; ++i) Put("U" + std::to_string(i));
  EXPECT_EQ(master_->EvictFromSegment(seg_, 1), kMiB);
  EXPECT_EQ(master_->EvictFromSegment(seg_, 4 * kMiB), 4 * kMiB);
  EXPECT_EQ(ExistsAll({"U0", "U1", "U2", "U3", "S0", "S1", "S2", "S3"}),
            (std::vector<int>{0, 0, 0, 0, 0, 1, 1, 1}));
}

// Builds k0..k7, accesses some of them, lets the leases expire and evicts
// `n` MiB: the n least recently used must be the ones gone.
TEST_F(MasterEvictionTest, EvictsLeastRecentlyUsedFirst) {
  const std::vector<int> order = {2, 4, 5, 7, 3, 0, 6, 1};
  for (int n = 1; n <= 8; ++n) {
    SCOPED_TRACE("evicting " + std::to_string(n));
    Make(Options());
    for (int i = 0; i < 8; ++i) Put(EvictionKey(i));
    clock_.Advance(Millis(1));  // after k7's PutEnd
    ASSERT_EQ(master_->Exists({EvictionKey(3)}), std::vector<int>{1});
    clock_.Advance(Millis(1));
    ASSERT_TRUE(master_->GetReplicas({EvictionKey(0)})[0].ok());
    clock_.Advance(Millis(1));
    ASSERT_EQ(master_->Exists({EvictionKey(6), EvictionKey(1)}), (std::vector<int>{1, 1}));
    clock_.Advance(Millis(1));
    ASSERT_EQ(master_->Exists({EvictionKey(1)}), std::vector<int>{1});  // k1 after k6
    clock_.Advance(kEvictionTtl + Millis(1));
    EXPECT_EQ(master_->EvictFromSegment(seg_, static_cast<uint64_t>(n) * kMiB),
              static_cast<uint64_t>(n) * kMiB);
    std::vector<int> want(8, 1);
    for (int j = 0; j < n; ++j) want[order[j]] = 0;
    std::vector<std::string> keys;
    for (int i = 0; i < 8; ++i) keys.push_back(EvictionKey(i));
    EXPECT_EQ(ExistsAll(keys), want);
  }
}

TEST_F(MasterEvictionTest, AllLeasedOrPinnedMeansNoAvailableHandle) {
  ReplicateConfig hard;
  hard.with_hard_pin = true;
  std::vector<std::string> keys;
  for (int i = 0; i < 5; ++i) {
    keys.push_back("H" + std::to_string(i));
    Put(keys.back(), kMiB, hard);
  }
  for (int i = 0; i < 5; ++i) {
    keys.push_back("L" + std::to_string(i));
    Put(keys.back());
    ASSERT_EQ(master_->Exists({keys.back()}), std::vector<int>{1});
  }
  EXPECT_EQ(Used(), kEvictionCap);
  EXPECT_EQ(Evicted(), 0u);
  ReplicateConfig soft;
  soft.with_soft_pin = true;
  for (const ReplicateConfig& cfg : {ReplicateConfig{}, soft, hard}) {
    auto r = master_->PutStart({"new", "tiny"}, {kMiB, 64}, cfg);
    EXPECT_EQ(r[0].code(), ErrorCode::NO_AVAILABLE_HANDLE);
    EXPECT_EQ(r[1].code(), ErrorCode::NO_AVAILABLE_HANDLE);
  }
  EXPECT_EQ(Evicted(), 0u);
  EXPECT_EQ(Used(), kEvictionCap);
  EXPECT_EQ(ExistsAll(keys), std::vector<int>(10, 1));
}

TEST_F(MasterEvictionTest, EvictsOnlyFromTheSegmentUnderPressure) {
  auto other = master_->MountSegment("other", kEvictionCap);
  ASSERT_TRUE(other.ok());
  ReplicateConfig on_seg;
  on_seg.preferred_segment = "seg";
  ReplicateConfig on_other;
  on_other.preferred_segment = "other";
  ReplicateConfig both;
  both.replica_num = 2;
  Put("a0", kMiB, on_seg);
  Put("b0", kMiB, on_other);
  Put("ab", kMiB, both);
  Put("a1", kMiB, on_seg);
  Put("b1", kMiB, on_other);
  const uint64_t other_used = master_->segments().Find(*other)->allocator->used();
  ASSERT_EQ(other_used, 3 * kMiB);
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 3 * kMiB);
  EXPECT_EQ(Used(), 0u);
  // The two-replica object went as a whole, freeing its other replica too.
  EXPECT_EQ(master_->segments().Find(*other)->allocator->used(), 2 * kMiB);
  EXPECT_EQ(ExistsAll({"a0", "a1", "ab", "b0", "b1"}), (std::vector<int>{0, 0, 0, 1, 1}));
  EXPECT_EQ(master_->EvictFromSegment(999, 100), 0u);
}

// Most recently used first: the opposite of the default.
class MruPolicy final : public EvictionPolicy {
 public:
  const char* name() const override { return "mru"; }
  void Order(std::vector<EvictionCandidate>& candidates) const override {
    ++calls;
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const EvictionCandidate& a, const EvictionCandidate& b) {
                       return a.last_access > b.last_access;
                     });
  }
  mutable std::atomic<int> calls{0};
};

TEST_F(MasterEvictionTest, CustomPolicyFromOptionsIsUsed) {
  auto policy = std::make_shared<MruPolicy>();
  MasterOptions o = Options();
  o.policy = policy;
  Make(o);
  EXPECT_EQ(master_->options().policy.get(), policy.get());
  for (int i = 0; i < 9; ++i) Put(EvictionKey(i));
  EXPECT_EQ(policy->calls.load(), 0);
  // Past the watermark: the policy evicts the newest complete objects (k9 is
  // still pending, so k8 and k7).
  const uint64_t id = Start(EvictionKey(9));
  EXPECT_GE(policy->calls.load(), 1);
  EXPECT_EQ(Evicted(), 2u);
  End(EvictionKey(9), id);
  EXPECT_EQ(master_->EvictFromSegment(seg_, 1), kMiB);  // now k9
  std::vector<std::string> keys;
  for (int i = 0; i < 10; ++i) keys.push_back(EvictionKey(i));
  EXPECT_EQ(ExistsAll(keys), (std::vector<int>{1, 1, 1, 1, 1, 1, 1, 0, 0, 0}));
}

// Large shards (more than kExactEvictionShardObjects objects) are not walked whole per round: a
// round takes a window of each, continuing where the last one stopped, and the policy orders
// the window (an approximated LRU). Objects read since the others were put survive while older
// ones are in the window; a window with too few candidates (here: every other shard's objects
// leased) falls back to the whole table, so a round still frees what it was asked for.
class MasterWindowedEvictionTest : public MasterEvictionTest {
 protected:
  static constexpr uint64_t kSize = 64;
  void Fill(uint32_t shards, size_t per_shard) {
    MasterOptions o = Options();
    o.shards = shards;
    o.lease_ttl = Millis(1000);
    o.high_watermark = 1.0;
    count_ = shards * per_shard;
    Make(o, 2 * count_ * kSize);
    for (size_t first = 0; first < count_; first += 1024) {
      std::vector<std::string> keys;
      for (size_t i = first; i < std::min(count_, first + 1024); ++i) keys.push_back(Key(i));
      auto started = master_->PutStart(keys, std::vector<uint64_t>(keys.size(), kSize), {});
      std::vector<uint64_t> ids;
      for (auto& s : started) ids.push_back(s.ok() ? s->put_id : 0);
      for (const Status& st : master_->PutEnd(keys, ids, std::vector<uint64_t>(keys.size(), 0))) {
        ASSERT_TRUE(st.ok()) << st.ToString();
      }
      clock_.Advance(Millis(1));
    }
  }
  static std::string Key(size_t i) { return "window-" + std::to_string(i); }
  size_t count_ = 0;
};

TEST_F(MasterWindowedEvictionTest, ARoundEvictsTheOldestOfAWindowAndMovesOn) {
  Fill(1, 3 * MasterService::kExactEvictionShardObjects);
  std::vector<std::string> odd;
  for (size_t i = 1; i < count_; i += 2) odd.push_back(Key(i));
  clock_.Advance(Millis(10));
  for (const auto& r : master_->GetReplicas(odd)) ASSERT_TRUE(r.ok());  // read: recent
  clock_.Advance(Millis(2000));                                         // leases over
  for (int round = 0; round < 20; ++round) {
    EXPECT_GE(master_->EvictFromSegment(seg_, 64 * kSize), 64 * kSize) << "round " << round;
  }
  EXPECT_GE(Evicted(), 20u * 64);
  for (int e : master_->Exists(odd)) ASSERT_EQ(e, 1);  // no recently read object went
}

TEST_F(MasterWindowedEvictionTest, AWindowShortOfCandidatesFallsBackToTheWholeTable) {
  constexpr uint32_t kShards = 16;
  Fill(kShards, MasterService::kExactEvictionShardObjects + 1000);
  std::vector<std::string> others;
  size_t in_shard0 = 0;
  const ObjectTable table(kShards);  // the master's, for its shard of a key
  for (size_t i = 0; i < count_; ++i) {
    if (table.ShardOf(Key(i)) == 0) {
      ++in_shard0;
    } else {
      others.push_back(Key(i));
    }
  }
  ASSERT_GT(in_shard0, 2000u);
  for (const auto& r : master_->GetReplicas(others)) ASSERT_TRUE(r.ok());  // leased
  // Shard 0's window holds 8 x 1/16 of the target: half of it. The rest needs the fallback.
  EXPECT_GE(master_->EvictFromSegment(seg_, 2000 * kSize), 2000 * kSize);
  EXPECT_EQ(Evicted(), 2000u);
}

}  // namespace
}  // namespace tierkv
