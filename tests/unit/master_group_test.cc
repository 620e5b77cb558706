// MasterService groups: whole-group leases, all-or-none eviction and unmount,
// lookups of members homed in another shard (redirects), RemoveAll.
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/eviction_policy.h"
#include "master/master_service.h"
#include "master/object_table.h"
#include "size_units.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {
namespace {

constexpr Millis kGroupTtl{10000};
constexpr uint32_t kShards = 64;

std::vector<std::string> Members(const std::string& group, int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) {
    keys.push_back("model@tp_rank:" + std::to_string(i) + "@group:" + group + "@chunk");
  }
  return keys;
}

ReplicateConfig Grouped(const std::string& group, size_t n) {
  ReplicateConfig c;
  c.group_ids.assign(n, group);
  return c;
}

// LRU, with a hook run once, on the first Order() call: that is between the
// master's candidate collection and its evictions, with no lock held, so the
// hook plays a concurrent client acting in that window.
class HookPolicy final : public EvictionPolicy {
 public:
  const char* name() const override { return "hook"; }
  void Order(std::vector<EvictionCandidate>& candidates) const override {
    if (hook && !fired) {
      fired = true;  // before running it: the hook's own puts may evict
      hook();
    }
    lru_.Order(candidates);
  }
  std::function<void()> hook;
  mutable bool fired = false;

 private:
  LruEvictionPolicy lru_;
};

class MasterGroupTest : public ::testing::Test {
 protected:
  MasterOptions Options() {
    MasterOptions o;
    o.clock = &clock_;
    o.lease_ttl = kGroupTtl;
    o.shards = kShards;
    return o;
  }
  void Make(MasterOptions o, uint64_t capacity = 10 * kMiB) {
    master_ = std::make_unique<MasterService>(std::move(o));
    auto seg = master_->MountSegment("seg", capacity);
    ASSERT_TRUE(seg.ok());
    seg_ = *seg;
  }
  void SetUp() override { Make(Options()); }

  uint64_t Used(SegmentId id) const { return master_->segments().Find(id)->allocator->used(); }

  // PutStart of `keys` in `group` ("" = ungrouped); returns put ids, failing
  // the test for any key that did not start.
  std::vector<uint64_t> Start(const std::vector<std::string>& keys, const std::string& group,
                              uint64_t size, ReplicateConfig cfg = {}) {
    if (!group.empty()) cfg.group_ids.assign(keys.size(), group);
    auto r = master_->PutStart(keys, std::vector<uint64_t>(keys.size(), size), cfg);
    std::vector<uint64_t> ids;
    for (size_t i = 0; i < keys.size(); ++i) {
      EXPECT_TRUE(r[i].ok()) << keys[i] << ": " << r[i].status().ToString();
      ids.push_back(r[i].ok() ? r[i]->put_id : 0);
    }
    return ids;
  }
  void End(const std::vector<std::string>& keys, const std::vector<uint64_t>& ids,
           uint64_t checksum = 0) {
    auto st = master_->PutEnd(keys, ids, std::vector<uint64_t>(keys.size(), checksum));
    for (size_t i = 0; i < keys.size(); ++i) EXPECT_TRUE(st[i].ok()) << keys[i];
    clock_.Advance(Millis(1));  // later puts are more recently used
  }
  void Put(const std::vector<std::string>& keys, const std::string& group, uint64_t size,
           ReplicateConfig cfg = {}, uint64_t checksum = 0) {
    End(keys, Start(keys, group, size, std::move(cfg)), checksum);
  }
  // Exists of every key (grants leases).
  std::vector<int> Exists(const std::vector<std::string>& keys) { return master_->Exists(keys); }
  // 1 when every key exists, 0 when none does, -1 for a partial group.
  int AllOrNone(const std::vector<std::string>& keys) {
    int found = 0;
    for (int e : Exists(keys)) found += e;
    if (found == 0) return 0;
    return found == static_cast<int>(keys.size()) ? 1 : -1;
  }
  void ExpireLeases() { clock_.Advance(kGroupTtl + Millis(1)); }

  ManualClock clock_;
  std::unique_ptr<MasterService> master_;
  SegmentId seg_ = 0;
  ObjectTable shards_{kShards};  // only to compute which shard a key hashes to
};

TEST_F(MasterGroupTest, LeaseOnOneMemberCoversTheGroup) {
  const auto g = Members("g", 4);
  const auto h = Members("h", 3);
  Put(g, "g", 64 * kKiB);
  Put(h, "h", 64 * kKiB);
  Put({"u"}, "", 64 * kKiB);
  EXPECT_EQ(master_->Stats().groups, 2u);

  ASSERT_EQ(Exists({g[0]}), std::vector<int>{1});
  const SteadyTime now = clock_.Now();
  auto r = master_->GetReplicas({h[2]});
  ASSERT_TRUE(r[0].ok());
  EXPECT_EQ(r[0]->lease_deadline, now + kGroupTtl);
  // Every member is protected from Remove, not just the one read.
  for (const auto& key : g)
    EXPECT_EQ(master_->Remove(key, false).code(), ErrorCode::OBJECT_HAS_LEASE);
  for (const auto& key : h)
    EXPECT_EQ(master_->Remove(key, false).code(), ErrorCode::OBJECT_HAS_LEASE);
  EXPECT_TRUE(master_->Remove("u", false).ok());
  // ... and from eviction.
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 0u);
  EXPECT_EQ(master_->RemoveAll(false), 0u);
  EXPECT_EQ(master_->Stats().objects, 7u);

  clock_.Advance(kGroupTtl - Millis(1));
  EXPECT_EQ(master_->Remove(g[1], false).code(), ErrorCode::OBJECT_HAS_LEASE);
  clock_.Advance(Millis(2));
  EXPECT_TRUE(master_->Remove(g[1], false).ok());
  // The rest of both groups is evictable now, as whole groups.
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 6 * 64 * kKiB);
  EXPECT_EQ(master_->Stats().objects, 0u);
  EXPECT_EQ(master_->Stats().groups, 0u);
  EXPECT_EQ(Used(seg_), 0u);
}

TEST_F(MasterGroupTest, ForcedRemoveOfALeasedMember) {
  const auto g = Members("g", 2);
  Put(g, "g", 1024);
  ASSERT_EQ(Exists({g[1]}), std::vector<int>{1});
  EXPECT_EQ(master_->Remove(g[0], false).code(), ErrorCode::OBJECT_HAS_LEASE);
  EXPECT_TRUE(master_->Remove(g[0], true).ok());
  EXPECT_EQ(master_->GetReplicas({g[0]})[0].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(master_->Remove(g[1], false).code(), ErrorCode::OBJECT_HAS_LEASE);
}

TEST_F(MasterGroupTest, WatermarkEvictsAWholeGroup) {
  // Groups of 4 x 512 KiB = 2 MiB on a 10 MiB segment.
  std::vector<std::vector<std::string>> groups;
  for (int i = 0; i < 4; ++i) {
    groups.push_back(Members("G" + std::to_string(i), 4));
    Put(groups.back(), "G" + std::to_string(i), 512 * kKiB);
  }
  EXPECT_EQ(master_->Stats().evicted_objects, 0u);
  groups.push_back(Members("G4", 4));
  const auto ids = Start(groups[4], "G4", 512 * kKiB);  // 10 MiB: past 0.90
  // The eviction target (1.5 MiB) is less than a group: the whole LRU group
  // goes all the same, never three or two of its members.
  EXPECT_EQ(master_->Stats().evicted_objects, 4u);
  EXPECT_EQ(master_->Stats().evicted_bytes, 2 * kMiB);
  EXPECT_EQ(Used(seg_), 8 * kMiB);
  End(groups[4], ids);
  EXPECT_EQ(AllOrNone(groups[0]), 0);
  for (int i = 1; i < 5; ++i) EXPECT_EQ(AllOrNone(groups[i]), 1) << "group " << i;
}

TEST_F(MasterGroupTest, EvictionNeverLeavesAPartialGroup) {
  Make(Options(), 8 * kMiB);
  std::mt19937 rng(7);
  std::vector<std::vector<std::string>> groups;
  std::vector<std::string> singles;
  int cross_shard = 0;
  for (int round = 0; round < 150; ++round) {
    const std::string gid = "tierkv:model@chunk" + std::to_string(round);
    auto keys = Members(gid, 1 + static_cast<int>(rng() % 6));
    for (const auto& k : keys) cross_shard += shards_.ShardOf(k) != shards_.ShardOf(gid);
    // One size for all: freed space always fits the next object, so every put
    // succeeds (eviction frees bytes, not contiguous ranges).
    const uint64_t size = 256 * kKiB;
    ReplicateConfig cfg;
    cfg.with_soft_pin = rng() % 5 == 0;
    Put(keys, gid, size, cfg);
    groups.push_back(std::move(keys));
    if (round % 3 == 0) {
      singles.push_back("single" + std::to_string(round));
      Put({singles.back()}, "", size);
    }
    // Check every group so far, then let the checks' leases run out.
    for (size_t g = 0; g < groups.size(); ++g) {
      ASSERT_NE(AllOrNone(groups[g]), -1) << "round " << round << ", group " << g;
    }
    ASSERT_LE(Used(seg_), 8 * kMiB);
    ExpireLeases();
  }
  // The scenario did exercise eviction and cross-shard members.
  EXPECT_GT(master_->Stats().evicted_objects, 100u);
  EXPECT_GT(cross_shard, 100);
  int alive = 0;
  for (const auto& g : groups) alive += AllOrNone(g) == 1;
  EXPECT_GT(alive, 0);
  EXPECT_LT(alive, static_cast<int>(groups.size()));
}

TEST_F(MasterGroupTest, MembersHomedInOtherShardsAreFoundByKey) {
  const std::string gid = "tierkv:model@abcdef";
  const auto keys = Members(gid, 32);
  int elsewhere = 0;
  for (const auto& k : keys) elsewhere += shards_.ShardOf(k) != shards_.ShardOf(gid);
  ASSERT_GE(elsewhere, 16) << "the test needs members whose key shard is not the group's";

  const auto ids = Start(keys, gid, 1000);
  EXPECT_EQ(Exists(keys), std::vector<int>(keys.size(), 0));  // pending
  for (const auto& r : master_->GetReplicas(keys)) {
    EXPECT_EQ(r.code(), ErrorCode::REPLICA_IS_NOT_READY);
  }
  End(keys, ids, 11);
  EXPECT_EQ(Exists(keys), std::vector<int>(keys.size(), 1));
  for (const auto& r : master_->GetReplicas(keys)) {
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->checksum, 11u);
    EXPECT_EQ(r->size, 1000u);
  }
  // Mixed batch: redirected, missing and ungrouped keys keep their order.
  Put({"plain"}, "", 10);
  EXPECT_EQ(Exists({keys[5], "missing", "plain", keys[0]}), (std::vector<int>{1, 0, 1, 1}));

  // The key exists wherever its group lives: no put of it, grouped or not.
  for (const auto& k : keys) {
    EXPECT_EQ(master_->PutStart({k}, {10}, {})[0].code(), ErrorCode::OBJECT_ALREADY_EXISTS);
    EXPECT_EQ(master_->PutStart({k}, {10}, Grouped("other", 1))[0].code(),
              ErrorCode::OBJECT_ALREADY_EXISTS);
    EXPECT_EQ(master_->PutStart({k}, {10}, Grouped(gid, 1))[0].code(),
              ErrorCode::OBJECT_ALREADY_EXISTS);
  }
  EXPECT_EQ(master_->PutStart({"plain"}, {10}, Grouped(gid, 1))[0].code(),
            ErrorCode::OBJECT_ALREADY_EXISTS);
  EXPECT_EQ(master_->Stats().objects, keys.size() + 1);
}

TEST_F(MasterGroupTest, RemovedOrEvictedKeysCanBePutAgainDifferently) {
  const std::string gid = "tierkv:model@0123";
  const auto keys = Members(gid, 24);
  Put(keys, gid, 4096, {}, 1);

  // Removed one by one, then put ungrouped: found with the new checksum.
  for (const auto& k : keys) ASSERT_TRUE(master_->Remove(k, false).ok()) << k;
  EXPECT_EQ(master_->Stats().groups, 0u);
  Put(keys, "", 4096, {}, 2);
  EXPECT_EQ(master_->Stats().groups, 0u);
  for (const auto& r : master_->GetReplicas(keys)) {
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->checksum, 2u);
  }
  ExpireLeases();
  EXPECT_EQ(master_->RemoveAll(false), keys.size());

  // Put in another group, evicted as a whole, put in a third group.
  const std::string gid2 = "tierkv:model@4567";
  Put(keys, gid2, 4096, {}, 3);
  for (const auto& r : master_->GetReplicas(keys)) {
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->checksum, 3u);
  }
  ExpireLeases();
  EXPECT_EQ(master_->EvictFromSegment(seg_, 1), keys.size() * 4096);
  EXPECT_EQ(Exists(keys), std::vector<int>(keys.size(), 0));
  const std::string gid3 = "tierkv:model@89ab";
  Put(keys, gid3, 4096, {}, 4);
  for (const auto& r : master_->GetReplicas(keys)) {
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->checksum, 4u);
  }
  ExpireLeases();

  // Revoked and reclaimed grouped puts free their keys too.
  ASSERT_EQ(master_->RemoveAll(false), keys.size());
  auto ids = Start(keys, gid, 100);
  for (const auto& st : master_->PutRevoke(keys, ids)) EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(master_->Stats().groups, 0u);
  Put(keys, "", 100, {}, 5);
  for (const auto& r : master_->GetReplicas(keys)) {
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->checksum, 5u);
  }
  ExpireLeases();
  ASSERT_EQ(master_->RemoveAll(false), keys.size());
  ids = Start(keys, gid2, 100);
  clock_.Advance(Options().put_timeout);
  EXPECT_EQ(master_->ReclaimAbandonedPuts(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(master_->PutEnd({keys[i]}, {ids[i]}, {0})[0].code(), ErrorCode::OBJECT_NOT_FOUND);
  }
  Put(keys, gid, 100, {}, 6);
  for (const auto& r : master_->GetReplicas(keys)) {
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->checksum, 6u);
  }
  EXPECT_EQ(master_->Stats().groups, 1u);
  EXPECT_EQ(master_->Stats().objects, keys.size());
  EXPECT_EQ(Used(seg_), keys.size() * 128);
}

TEST_F(MasterGroupTest, GroupWithAPendingMemberIsNotEvicted) {
  const auto g = Members("g", 3);
  Put({g[0], g[1]}, "g", kMiB);
  const auto pending = Start({g[2]}, "g", kMiB);  // joins the group, pending
  Put({"u"}, "", kMiB);
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), kMiB);  // only "u"
  EXPECT_EQ(master_->Stats().objects, 3u);
  EXPECT_EQ(master_->Stats().pending_objects, 1u);
  End({g[2]}, pending);
  EXPECT_EQ(master_->EvictFromSegment(seg_, 1), 3 * kMiB);  // now the whole group
  EXPECT_EQ(master_->Stats().objects, 0u);
  EXPECT_EQ(master_->Stats().groups, 0u);
  EXPECT_EQ(Used(seg_), 0u);
}

TEST_F(MasterGroupTest, HardPinnedMemberKeepsTheGroupSoftPinnedGoesLast) {
  ReplicateConfig hard;
  hard.with_hard_pin = true;
  ReplicateConfig soft;
  soft.with_soft_pin = true;
  const auto pinned = Members("pinned", 3);
  Put({pinned[0], pinned[1]}, "pinned", kMiB);
  Put({pinned[2]}, "pinned", kMiB, hard);
  const auto softg = Members("soft", 2);  // oldest evictable group, soft-pinned
  Put({softg[0]}, "soft", kMiB, soft);
  Put({softg[1]}, "soft", kMiB);
  const auto plain = Members("plain", 2);
  Put(plain, "plain", kMiB);
  EXPECT_EQ(master_->EvictFromSegment(seg_, 1), 2 * kMiB);  // "plain" first
  EXPECT_EQ(AllOrNone(plain), 0);
  EXPECT_EQ(AllOrNone(softg), 1);
  ExpireLeases();
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 2 * kMiB);  // then "soft"
  EXPECT_EQ(AllOrNone(softg), 0);
  EXPECT_EQ(AllOrNone(pinned), 1);
  ExpireLeases();
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 0u);
  // Hard-pinned members can still be removed.
  for (const auto& k : pinned) EXPECT_TRUE(master_->Remove(k, false).ok()) << k;
}

TEST_F(MasterGroupTest, UnmountDropsAGroupThatLostAMember) {
  auto b = master_->MountSegment("b", 10 * kMiB);
  ASSERT_TRUE(b.ok());
  ReplicateConfig on_a;
  on_a.preferred_segment = "seg";
  ReplicateConfig on_b;
  on_b.preferred_segment = "b";
  ReplicateConfig both;
  both.replica_num = 2;
  // g loses g[0] (its only replica was on "seg"): all of g goes, including
  // g[1] on "b" and g[2] that keeps a replica on "b".
  const auto g = Members("g", 3);
  Put({g[0]}, "g", 1024, on_a);
  Put({g[1]}, "g", 1024, on_b);
  Put({g[2]}, "g", 1024, both);
  // k keeps every member (k[0] has a second replica on "b").
  const auto k = Members("k", 2);
  Put({k[0]}, "k", 2048, both);
  Put({k[1]}, "k", 2048, on_b);
  // h lives on "b" only.
  const auto h = Members("h", 2);
  Put(h, "h", 4096, on_b);
  // A pending member of p on "seg": p goes, and the writer's PutEnd fails.
  const auto p = Members("p", 2);
  Put({p[0]}, "p", 1024, on_b);
  const auto pid = Start({p[1]}, "p", 1024, on_a);
  Put({"u"}, "", 1024, on_a);
  ASSERT_EQ(master_->Stats().groups, 4u);

  ASSERT_TRUE(master_->UnmountSegment(seg_).ok());
  EXPECT_EQ(AllOrNone(g), 0);
  EXPECT_EQ(AllOrNone(p), 0);
  EXPECT_EQ(master_->PutEnd({p[1]}, pid, {0})[0].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(Exists({"u"}), std::vector<int>{0});
  EXPECT_EQ(AllOrNone(k), 1);
  EXPECT_EQ(AllOrNone(h), 1);
  auto r = master_->GetReplicas({k[0]});
  ASSERT_TRUE(r[0].ok());
  ASSERT_EQ(r[0]->replicas.size(), 1u);
  EXPECT_EQ(r[0]->replicas[0].segment, *b);
  EXPECT_EQ(master_->Stats().groups, 2u);
  EXPECT_EQ(master_->Stats().objects, 4u);
  EXPECT_EQ(Used(*b), 2 * 2048u + 2 * 4096u);  // g's and p's space on "b" freed
  // The dropped keys can be put again, grouped differently.
  Put(g, "", 64);
  Put(p, "g", 64);
  EXPECT_EQ(AllOrNone(g), 1);
  EXPECT_EQ(AllOrNone(p), 1);
}

TEST_F(MasterGroupTest, RemoveAllWithGroups) {
  const auto leased = Members("leased", 3);
  const auto plain = Members("plain", 4);
  const auto partial = Members("partial", 3);
  Put(leased, "leased", 1024);
  Put(plain, "plain", 1024);
  Put({partial[0], partial[1]}, "partial", 1024);
  const auto pid = Start({partial[2]}, "partial", 1024);
  Put({"u"}, "", 1024);
  ASSERT_EQ(Exists({leased[1]}), std::vector<int>{1});

  // The leased group is skipped whole; the pending member stays pending.
  EXPECT_EQ(master_->RemoveAll(false), 4u + 2u + 1u);
  EXPECT_EQ(master_->Stats().objects, 4u);
  EXPECT_EQ(master_->Stats().groups, 2u);
  EXPECT_EQ(master_->GetReplicas({partial[2]})[0].code(), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(AllOrNone(leased), 1);
  EXPECT_EQ(AllOrNone(plain), 0);

  EXPECT_EQ(master_->RemoveAll(true), 3u);
  EXPECT_EQ(AllOrNone(leased), 0);
  End({partial[2]}, pid);
  EXPECT_EQ(master_->RemoveAll(true), 1u);
  MasterStats st = master_->Stats();
  EXPECT_EQ(st.objects, 0u);
  EXPECT_EQ(st.groups, 0u);
  EXPECT_EQ(Used(seg_), 0u);
  // No stale state blocks the keys.
  Put(leased, "plain", 64);
  Put(plain, "", 64);
  EXPECT_EQ(AllOrNone(leased), 1);
  EXPECT_EQ(AllOrNone(plain), 1);
}

// The races below are replayed deterministically: the policy's hook runs
// between candidate collection and eviction, as another client would.

TEST_F(MasterGroupTest, KeyThatJoinedAGroupAfterCollectionIsNotEvictedAlone) {
  auto policy = std::make_shared<HookPolicy>();
  MasterOptions o = Options();
  o.shards = 1;  // every group homes where every key does
  o.policy = policy;
  Make(o);
  Put({"k"}, "", kMiB);
  ExpireLeases();
  policy->hook = [&] {
    // "k" (collected as an ungrouped candidate) is removed and put again as a
    // member of group G.
    ASSERT_TRUE(master_->Remove("k", true).ok());
    Put({"k", "m"}, "G", kMiB);
  };
  master_->EvictFromSegment(seg_, 1);
  ASSERT_TRUE(policy->fired);
  EXPECT_NE(AllOrNone({"k", "m"}), -1) << "eviction split group G";
}

TEST_F(MasterGroupTest, GroupThatGainedAPendingMemberAfterCollectionIsNotEvicted) {
  auto policy = std::make_shared<HookPolicy>();
  MasterOptions o = Options();
  o.policy = policy;
  Make(o);
  const auto g = Members("g", 3);
  Put({g[0], g[1]}, "g", kMiB);
  std::vector<uint64_t> pid;
  policy->hook = [&] { pid = Start({g[2]}, "g", kMiB); };
  EXPECT_EQ(master_->EvictFromSegment(seg_, 1), 0u);
  ASSERT_TRUE(policy->fired);
  EXPECT_EQ(master_->GetReplicas({g[2]})[0].code(), ErrorCode::REPLICA_IS_NOT_READY);
  End({g[2]}, pid);
  EXPECT_EQ(AllOrNone(g), 1);
}

TEST_F(MasterGroupTest, GroupLeasedAfterCollectionIsNotEvicted) {
  auto policy = std::make_shared<HookPolicy>();
  MasterOptions o = Options();
  o.policy = policy;
  Make(o);
  const auto g = Members("g", 3);
  Put(g, "g", kMiB);
  Put({"u"}, "", kMiB);
  policy->hook = [&] { ASSERT_EQ(master_->Exists({g[2], "u"}), (std::vector<int>{1, 1})); };
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 0u);
  ASSERT_TRUE(policy->fired);
  EXPECT_EQ(master_->Stats().objects, 4u);
}

}  // namespace
}  // namespace tierkv
