// The "reuse" eviction policy (src/master/reuse_policy.h): its classes and scales, the
// tracker's counting and ghosts, and — through MasterService — that it only reorders: leases,
// pins, pending puts and groups keep every guarantee of LRU eviction.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/eviction_policy.h"
#include "master/master_service.h"
#include "master/object_table.h"
#include "master/reuse_policy.h"
#include "size_units.h"

namespace tierkv {
namespace {

constexpr Millis kReuseTtl{1000};

TEST(ReuseClass, BucketsAndTails) {
  EXPECT_EQ(ReuseClass(0, false), 0);
  EXPECT_EQ(ReuseClass(1, false), 0);
  EXPECT_EQ(ReuseClass(2, false), 1);
  EXPECT_EQ(ReuseClass(4, false), 3);
  EXPECT_EQ(ReuseClass(5, false), 4);
  EXPECT_EQ(ReuseClass(8, false), 4);
  EXPECT_EQ(ReuseClass(9, false), 5);
  EXPECT_EQ(ReuseClass(32, false), 6);
  EXPECT_EQ(ReuseClass(33, false), 7);
  EXPECT_EQ(ReuseClass(1u << 30, false), 7);
  EXPECT_EQ(ReuseClass(1, true), kReuseRefBuckets);
  EXPECT_EQ(ReuseClass(1u << 30, true), kReuseClasses - 1);
}

TEST(ReusePolicy, ScalesAreMeasuredProbabilitiesRelativeToOnce) {
  ReuseCounts counts;
  // No data: every scale is 1 (LRU).
  for (double s : ReuseEvictionPolicy::Scales(counts)) EXPECT_EQ(s, 1.0);
  counts.reached[ReuseClass(1, false)] = 1000;
  counts.reused[ReuseClass(1, false)] = 250;
  counts.reached[ReuseClass(2, false)] = 200;
  counts.reused[ReuseClass(2, false)] = 100;
  counts.reached[ReuseClass(1, true)] = 100;  // tails: never reused
  counts.reached[ReuseClass(3, false)] = 10;  // too few to tell
  counts.reused[ReuseClass(3, false)] = 10;
  const auto scale = ReuseEvictionPolicy::Scales(counts);
  EXPECT_DOUBLE_EQ(scale[ReuseClass(1, false)], 1.0);
  EXPECT_DOUBLE_EQ(scale[ReuseClass(2, false)], 2.0);
  EXPECT_DOUBLE_EQ(scale[ReuseClass(1, true)], 1.0 / ReuseEvictionPolicy::kMaxScale);
  EXPECT_DOUBLE_EQ(scale[ReuseClass(3, false)], 1.0);
}

TEST(ReusePolicy, OrdersByScaledAgeWithSoftPinsLast) {
  ReuseCounts counts;
  counts.reached[ReuseClass(1, false)] = 1000;
  counts.reused[ReuseClass(1, false)] = 250;
  counts.reached[ReuseClass(2, false)] = 1000;
  counts.reused[ReuseClass(2, false)] = 1000;  // scale 4
  const SteadyTime now{Millis(100'000)};
  auto at = [&](int ms_ago) { return now - Millis(ms_ago); };
  std::vector<EvictionCandidate> c = {
      {0, "twice-old", false, false, at(300), 1, static_cast<uint8_t>(ReuseClass(2, false))},
      {0, "once-young", false, false, at(100), 1, static_cast<uint8_t>(ReuseClass(1, false))},
      {0, "pinned-oldest", false, true, at(10'000), 1, static_cast<uint8_t>(ReuseClass(1, false))},
      {0, "once-old", false, false, at(200), 1, static_cast<uint8_t>(ReuseClass(1, false))},
  };
  ReuseEvictionPolicy().OrderWithReuse(c, counts, now);
  // Scaled ages: once-old 200, once-young 100, twice-old 300 / 4 = 75; the soft pin last.
  ASSERT_EQ(c.size(), 4u);
  EXPECT_EQ(c[0].name, "once-old");
  EXPECT_EQ(c[1].name, "once-young");
  EXPECT_EQ(c[2].name, "twice-old");
  EXPECT_EQ(c[3].name, "pinned-oldest");
  // Without counts it is LRU.
  ReuseEvictionPolicy().Order(c);
  EXPECT_EQ(c[0].name, "twice-old");
  EXPECT_EQ(c[3].name, "pinned-oldest");
}

TEST(ReuseTracker, CountsOncePerLeasePeriodAndGhostsCarryCounts) {
  ReuseTracker t(2, kReuseTtl);
  SteadyTime now{Millis(1'000'000)};
  ObjectMeta m;
  t.OnPut(0, /*key_hash=*/42, /*tail=*/false, m, now);
  EXPECT_EQ(m.reuse_references, 1u);
  EXPECT_EQ(t.Totals().reached[0], 1u);
  // A lookup and a read right after the put, then one right after: one use at most.
  t.OnReference(0, m, now + Millis(10));
  EXPECT_EQ(m.reuse_references, 1u);
  t.OnReference(0, m, now + kReuseTtl);
  EXPECT_EQ(m.reuse_references, 2u);
  t.OnReference(0, m, now + kReuseTtl + Millis(5));
  EXPECT_EQ(m.reuse_references, 2u);
  ReuseCounts c = t.Totals();
  EXPECT_EQ(c.reused[ReuseClass(1, false)], 1u);
  EXPECT_EQ(c.reached[ReuseClass(2, false)], 1u);
  // Evicted, then put again: a reuse of its last class, and the count goes on.
  t.OnEvict(0, 42, m, 10);
  EXPECT_EQ(t.ghosts(0), 1u);
  ObjectMeta again;
  t.OnPut(0, 42, false, again, now + 5 * kReuseTtl);
  EXPECT_EQ(again.reuse_references, 3u);
  EXPECT_EQ(t.ghosts(0), 0u);
  EXPECT_EQ(t.Totals().reused[ReuseClass(2, false)], 1u);
  // A key never evicted starts at 1; ghosts are per shard.
  t.OnEvict(1, 7, again, 10);
  ObjectMeta other;
  t.OnPut(0, 7, true, other, now);
  EXPECT_EQ(other.reuse_references, 1u);
  EXPECT_TRUE(other.reuse_tail);
}

TEST(ReuseTracker, GhostsAreBoundedByTheShardsObjects) {
  ReuseTracker t(1, kReuseTtl);
  ObjectMeta m;
  m.reuse_references = 1;
  for (uint64_t h = 0; h < 100; ++h) t.OnEvict(0, h, m, /*shard_objects=*/10);
  EXPECT_EQ(t.ghosts(0), 10u);
  // The oldest went: hash 0 is forgotten, hash 99 is remembered.
  ObjectMeta a, b;
  t.OnPut(0, 0, false, a, SteadyTime{});
  t.OnPut(0, 99, false, b, SteadyTime{});
  EXPECT_EQ(a.reuse_references, 1u);
  EXPECT_EQ(b.reuse_references, 2u);
}

// MasterService with the reuse policy, trained so that tails (smaller than the parent they
// name) are never reused: the policy then wants tails first, whatever their age.
class ReusePolicyMasterTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kCap = 8 * kMiB;
  static constexpr uint64_t kParent = 16 * kKiB;
  static constexpr uint64_t kTail = 4 * kKiB;

  void SetUp() override {
    MasterOptions o;
    o.clock = &clock_;
    o.lease_ttl = kReuseTtl;
    o.shards = 4;
    auto policy = MakeEvictionPolicy("reuse");
    ASSERT_TRUE(policy.ok());
    o.policy = *policy;
    master_ = std::make_unique<MasterService>(std::move(o));
    auto seg = master_->MountSegment("seg", kCap);
    ASSERT_TRUE(seg.ok());
    seg_ = *seg;
    EXPECT_STREQ(master_->policy().name(), "reuse");
    // 100 parents, half of them read again after a lease period; 100 tails never read.
    for (int i = 0; i < 100; ++i) Put("p" + std::to_string(i), kParent);
    for (int i = 0; i < 100; ++i)
      Put("t" + std::to_string(i), kTail, Hint("p" + std::to_string(i)));
    clock_.Advance(kReuseTtl);
    for (int i = 0; i < 100; i += 2) master_->Exists({"p" + std::to_string(i)});
    clock_.Advance(kReuseTtl);
  }
  static ReplicateConfig Hint(const std::string& parent, size_t n = 1) {
    ReplicateConfig c;
    c.parent_keys.assign(n, parent);
    return c;
  }
  uint64_t Start(const std::string& key, uint64_t size, const ReplicateConfig& cfg = {}) {
    auto r = master_->PutStart({key}, {size}, cfg);
    EXPECT_TRUE(r[0].ok()) << key << ": " << r[0].status().ToString();
    clock_.Advance(Millis(1));
    return r[0].ok() ? r[0]->put_id : 0;
  }
  void Put(const std::string& key, uint64_t size, const ReplicateConfig& cfg = {}) {
    const uint64_t id = Start(key, size, cfg);
    EXPECT_TRUE(master_->PutEnd({key}, {id}, {0})[0].ok()) << key;
  }
  // GetReplicas grants a lease: tests ask after their evictions.
  bool Stored(const std::string& key) { return master_->GetReplicas({key})[0].ok(); }
  uint64_t Used() const { return master_->segments().Find(seg_)->allocator->used(); }

  ManualClock clock_;
  std::unique_ptr<MasterService> master_;
  SegmentId seg_ = 0;
};

TEST_F(ReusePolicyMasterTest, TailsGoFirstAndHintlessObjectsByAge) {
  // A fresh tail and a fresh hintless object of the same size, after everything else.
  Put("young-tail", kTail, Hint("p0"));
  Put("young-plain", kTail);
  clock_.Advance(Millis(10));
  // Freeing a little takes the old tails (their ages count 64 times) before old parents; the
  // young objects, scaled or not, are younger than those.
  const uint64_t freed = master_->EvictFromSegment(seg_, 20 * kTail);
  EXPECT_GE(freed, 20 * kTail);
  EXPECT_TRUE(Stored("p1"));  // the oldest parent, never read again: still there
  EXPECT_TRUE(Stored("young-plain"));
  EXPECT_FALSE(Stored("t0"));
}

TEST_F(ReusePolicyMasterTest, ATailWhoseParentIsEarlierInTheSameBatchIsATail) {
  // A request's chunks come in one batch: the tail's parent is not stored yet when the batch
  // starts. Aged 100 ms (x64 as a tail), it ranks behind the 100 old tails and before the
  // oldest parent (~2 s, never read again); as a plain object it would rank after that parent.
  ReplicateConfig c;
  c.parent_keys = {"", "batch-parent"};
  auto r = master_->PutStart({"batch-parent", "batch-tail"}, {kParent, kTail}, c);
  ASSERT_TRUE(r[0].ok() && r[1].ok());
  ASSERT_TRUE(
      master_->PutEnd({"batch-parent", "batch-tail"}, {r[0]->put_id, r[1]->put_id}, {0, 0})[1]
          .ok());
  clock_.Advance(Millis(100));
  EXPECT_GE(master_->EvictFromSegment(seg_, 101 * kTail), 101 * kTail);
  EXPECT_FALSE(Stored("t99"));
  EXPECT_FALSE(Stored("batch-tail"));
  EXPECT_TRUE(Stored("p1"));
  EXPECT_TRUE(Stored("batch-parent"));
}

TEST_F(ReusePolicyMasterTest, NeverEvictsLeasedPinnedOrPendingObjects) {
  ReplicateConfig hard = Hint("p2");
  hard.with_hard_pin = true;
  Put("pinned-tail", kTail, hard);
  const uint64_t pending = Start("pending-tail", kTail, Hint("p4"));
  Put("leased-tail", kTail, Hint("p6"));
  master_->GetReplicas({"leased-tail"});  // a reader holds it for kReuseTtl
  clock_.Advance(Millis(10));
  // Ask for everything: all that may go goes, nothing else.
  master_->EvictFromSegment(seg_, 2 * kCap);
  EXPECT_TRUE(Stored("pinned-tail"));
  EXPECT_TRUE(Stored("leased-tail"));
  EXPECT_FALSE(Stored("t1"));
  EXPECT_FALSE(Stored("p1"));
  // The pending put is still the writer's: it ends fine and its bytes were never reclaimed.
  EXPECT_TRUE(master_->PutEnd({"pending-tail"}, {pending}, {0})[0].ok());
  EXPECT_TRUE(Stored("pending-tail"));
  EXPECT_EQ(Used(), 3 * kTail);
}

TEST_F(ReusePolicyMasterTest, GroupsGoWholeOrNotAtAll) {
  // A group with a tail member: it is ranked as its most valuable member, and goes whole.
  ReplicateConfig g;
  g.group_ids.assign(3, "group-a");
  g.parent_keys = {"p8", "", ""};
  auto r = master_->PutStart({"ga-tail", "ga-1", "ga-2"}, {kTail, kParent, kParent}, g);
  for (auto& x : r) ASSERT_TRUE(x.ok());
  ASSERT_TRUE(master_
                  ->PutEnd({"ga-tail", "ga-1", "ga-2"}, {r[0]->put_id, r[1]->put_id, r[2]->put_id},
                           {0, 0, 0})[0]
                  .ok());
  // A second group whose member is leased: untouchable as a whole.
  ReplicateConfig h;
  h.group_ids.assign(2, "group-b");
  h.parent_keys = {"p10", ""};
  auto q = master_->PutStart({"gb-tail", "gb-1"}, {kTail, kParent}, h);
  for (auto& x : q) ASSERT_TRUE(x.ok());
  master_->PutEnd({"gb-tail", "gb-1"}, {q[0]->put_id, q[1]->put_id}, {0, 0});
  clock_.Advance(Millis(10));
  master_->Exists({"gb-1"});  // the lease covers the whole group
  clock_.Advance(Millis(10));
  master_->EvictFromSegment(seg_, 30 * kTail);
  const bool a_tail = Stored("ga-tail"), a1 = Stored("ga-1"), a2 = Stored("ga-2");
  EXPECT_EQ(a_tail, a1);
  EXPECT_EQ(a1, a2);
  EXPECT_TRUE(Stored("gb-tail"));
  EXPECT_TRUE(Stored("gb-1"));
  // Those reads leased both groups: let the leases lapse, lease group b again, take the rest.
  clock_.Advance(kReuseTtl);
  master_->Exists({"gb-tail"});
  clock_.Advance(Millis(10));
  master_->EvictFromSegment(seg_, 2 * kCap);
  EXPECT_FALSE(Stored("ga-1"));
  EXPECT_FALSE(Stored("ga-2"));
  EXPECT_FALSE(Stored("ga-tail"));
  EXPECT_TRUE(Stored("gb-tail"));
  EXPECT_TRUE(Stored("gb-1"));
}

TEST_F(ReusePolicyMasterTest, ParentKeysOfTheWrongLengthAreRejected) {
  ReplicateConfig c;
  c.parent_keys = {"p0", "p1"};
  auto r = master_->PutStart({"x"}, {kTail}, c);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_NE(r[0].status().message().find("parent_keys"), std::string::npos);
  // A parent that is not stored, or not a key at all, is only a missing hint.
  c.parent_keys = {"no-such-parent"};
  EXPECT_TRUE(master_->PutStart({"y"}, {kTail}, c)[0].ok());
  c.parent_keys = {std::string(5000, 'k')};
  EXPECT_TRUE(master_->PutStart({"z"}, {kTail}, c)[0].ok());
}

TEST(EvictionPolicyNames, FactoryKnowsLruAndReuse) {
  EXPECT_TRUE(IsEvictionPolicyName("lru"));
  EXPECT_TRUE(IsEvictionPolicyName("reuse"));
  EXPECT_FALSE(IsEvictionPolicyName("lfu"));
  auto lru = MakeEvictionPolicy("lru");
  ASSERT_TRUE(lru.ok());
  EXPECT_STREQ((*lru)->name(), "lru");
  EXPECT_FALSE((*lru)->learns_reuse());
  auto bad = MakeEvictionPolicy("lfu");
  EXPECT_EQ(bad.code(), ErrorCode::INVALID_PARAMS);
  EXPECT_NE(bad.status().message().find("\"reuse\""), std::string::npos);
}

}  // namespace
}  // namespace tierkv
