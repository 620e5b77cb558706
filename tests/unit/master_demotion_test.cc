// MasterService tier moves: demotion at eviction, write-behind, disk replica bookkeeping.
// A fake TierMover stands in for the segment owner's SSD tier; nothing touches bytes.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/master_service.h"
#include "master/tier_mover.h"
#include "size_units.h"

namespace tierkv {
namespace {

constexpr uint64_t kCap = 10 * kMiB;

std::string DemotionKey(int i) { return "k" + std::to_string(i); }

class DemotionMover : public TierMover {
 public:
  std::vector<Result<DiskLocation>> Demote(const std::vector<DemoteItem>& items) override {
    std::vector<Result<DiskLocation>> out;
    for (const auto& item : items) {
      calls.push_back(item);
      if (during) during(item);
      if (fail.count(item.key)) {
        out.emplace_back(ErrorCode::FILE_WRITE_FAIL, "injected");
        continue;
      }
      out.emplace_back(DiskLocation{region, generation, next_offset, item.size});
      next_offset += 4096;
    }
    return out;
  }
  std::vector<DemoteItem> calls;
  std::set<std::string> fail;
  std::function<void(const DemoteItem&)> during;
  uint32_t region = 3;
  uint64_t generation = 7;
  uint64_t next_offset = 4096;
};

class MasterDemotionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterOptions o;
    o.clock = &clock_;
    o.shards = 8;
    master_ = std::make_unique<MasterService>(o);
    seg_ = *master_->MountSegment("seg", kCap);
    mover_ = std::make_shared<DemotionMover>();
    master_->SetTierMover(seg_, mover_);
  }
  uint64_t Used() const { return master_->segments().Find(seg_)->allocator->used(); }
  void Put(const std::string& key, ReplicateConfig cfg = {}, uint64_t sum = 42) {
    auto r = master_->PutStart({key}, {kMiB}, cfg);
    ASSERT_TRUE(r[0].ok()) << r[0].status().ToString();
    ASSERT_TRUE(master_->PutEnd({key}, {r[0]->put_id}, {sum})[0].ok());
    clock_.Advance(Millis(1));
  }
  std::vector<ReplicaLocation> Replicas(const std::string& key) {
    auto r = master_->GetReplicas({key});
    return r[0].ok() ? r[0]->replicas : std::vector<ReplicaLocation>{};
  }
  void ExpireLeases() { clock_.Advance(Millis(60000)); }

  ManualClock clock_;
  std::unique_ptr<MasterService> master_;
  SegmentId seg_ = 0;
  std::shared_ptr<DemotionMover> mover_;
};

TEST_F(MasterDemotionTest, EvictionDemotesInsteadOfDropping) {
  for (int i = 0; i < 5; ++i) Put(DemotionKey(i), {}, 100 + i);
  const uint64_t freed = master_->EvictFromSegment(seg_, 2 * kMiB);
  EXPECT_EQ(freed, 2 * kMiB);
  EXPECT_EQ(Used(), 3 * kMiB);
  ASSERT_EQ(mover_->calls.size(), 2u);
  // LRU order: the two oldest, with their memory range and checksum.
  EXPECT_EQ(mover_->calls[0].key, "k0");
  EXPECT_EQ(mover_->calls[0].checksum, 100u);
  EXPECT_EQ(mover_->calls[0].size, kMiB);
  auto reps = Replicas("k0");
  ASSERT_EQ(reps.size(), 1u);
  EXPECT_EQ(reps[0].tier, ReplicaTier::kDisk);
  EXPECT_EQ(reps[0].disk.region, 3u);
  EXPECT_EQ(reps[0].disk.generation, 7u);
  EXPECT_EQ(reps[0].size, kMiB);
  EXPECT_EQ(master_->Exists({"k0", "k1", "k4"}), (std::vector<int>{1, 1, 1}));
  const auto st = master_->Stats();
  EXPECT_EQ(st.demoted_objects, 2u);
  EXPECT_EQ(st.demoted_bytes, 2 * kMiB);
  EXPECT_EQ(st.evicted_objects, 0u);
  EXPECT_EQ(st.disk_replicas, 2u);
  EXPECT_EQ(st.memory_replicas, 3u);
}

TEST_F(MasterDemotionTest, DiskOnlyObjectsAreNotEvictionCandidates) {
  for (int i = 0; i < 3; ++i) Put(DemotionKey(i));
  master_->EvictFromSegment(seg_, 3 * kMiB);
  ExpireLeases();
  mover_->calls.clear();
  EXPECT_EQ(master_->EvictFromSegment(seg_, kMiB), 0u);
  EXPECT_TRUE(mover_->calls.empty());
  EXPECT_EQ(master_->Stats().objects, 3u);
}

TEST_F(MasterDemotionTest, GroupDemotesTogetherOrIsDroppedWhole) {
  ReplicateConfig g;
  g.group_ids = {"g"};
  Put("a", g);
  Put("b", g);
  Put("c", g);
  master_->EvictFromSegment(seg_, kMiB);  // one member's bytes: the whole group moves
  EXPECT_EQ(mover_->calls.size(), 3u);
  for (const char* k : {"a", "b", "c"}) {
    auto reps = Replicas(k);
    ASSERT_EQ(reps.size(), 1u) << k;
    EXPECT_EQ(reps[0].tier, ReplicaTier::kDisk) << k;
  }
  EXPECT_EQ(Used(), 0u);

  ReplicateConfig h;
  h.group_ids = {"h"};
  Put("x", h);
  Put("y", h);
  mover_->fail = {"y"};
  ExpireLeases();
  master_->EvictFromSegment(seg_, kMiB);
  // y could not be written: the space is freed anyway and x goes with it (no partial group).
  EXPECT_EQ(master_->Exists({"x", "y"}), (std::vector<int>{0, 0}));
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(master_->Stats().demotion_failures, 2u);
}

TEST_F(MasterDemotionTest, ReaderLeasingDuringDemotionKeepsTheMemoryReplica) {
  Put("k");
  mover_->during = [&](const DemoteItem&) { master_->Exists({"k"}); };
  master_->EvictFromSegment(seg_, kMiB);
  auto reps = Replicas("k");
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_EQ(reps[0].tier, ReplicaTier::kMemory);  // memory first
  EXPECT_EQ(reps[1].tier, ReplicaTier::kDisk);
  EXPECT_EQ(Used(), kMiB);
  // Once the lease is gone the next pass frees the memory without writing again.
  mover_->during = nullptr;
  mover_->calls.clear();
  ExpireLeases();
  EXPECT_EQ(master_->EvictFromSegment(seg_, kMiB), kMiB);
  EXPECT_TRUE(mover_->calls.empty());
  reps = Replicas("k");
  ASSERT_EQ(reps.size(), 1u);
  EXPECT_EQ(reps[0].tier, ReplicaTier::kDisk);
}

TEST_F(MasterDemotionTest, RemovedWhileDemotingIsNotResurrected) {
  Put("k");
  mover_->during = [&](const DemoteItem& item) {
    EXPECT_TRUE(master_->Remove("k", /*force=*/true).ok());
    // The mover is still reading the range: it stays allocated, so no new put lands on it.
    EXPECT_EQ(Used(), kMiB);
    auto r = master_->PutStart({"other"}, {kMiB}, {});
    ASSERT_TRUE(r[0].ok());
    EXPECT_NE(r[0]->replicas[0].offset, item.offset);
    ASSERT_TRUE(master_->PutRevoke({"other"}, {r[0]->put_id})[0].ok());
  };
  master_->EvictFromSegment(seg_, kMiB);
  EXPECT_EQ(master_->Exists({"k"}), (std::vector<int>{0}));
  EXPECT_EQ(master_->Stats().objects, 0u);
  EXPECT_EQ(Used(), 0u);  // freed once the move finished
}

TEST_F(MasterDemotionTest, RemoveAllWhileDemotingKeepsTheRangeUntilTheMoveEnds) {
  Put("a");
  Put("b");
  mover_->during = [&](const DemoteItem&) {
    if (master_->Stats().objects == 0) return;
    EXPECT_EQ(master_->RemoveAll(/*force=*/true), 2u);
    EXPECT_GE(Used(), kMiB);  // the range being demoted is still held
  };
  master_->EvictFromSegment(seg_, kMiB);
  EXPECT_EQ(master_->Stats().objects, 0u);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(MasterDemotionTest, ReputWhileDemotingKeepsTheNewObject) {
  Put("k", {}, 1);
  mover_->during = [&](const DemoteItem&) {
    ASSERT_TRUE(master_->Remove("k", true).ok());
    auto r = master_->PutStart({"k"}, {kMiB}, {});
    ASSERT_TRUE(r[0].ok());
    ASSERT_TRUE(master_->PutEnd({"k"}, {r[0]->put_id}, {2})[0].ok());
  };
  master_->EvictFromSegment(seg_, kMiB);
  auto r = master_->GetReplicas({"k"});
  ASSERT_TRUE(r[0].ok());
  EXPECT_EQ(r[0]->checksum, 2u);
  ASSERT_EQ(r[0]->replicas.size(), 1u);
  EXPECT_EQ(r[0]->replicas[0].tier, ReplicaTier::kMemory);  // the old object's record is ignored
}

TEST_F(MasterDemotionTest, DropDiskReplicasMatchesRegionAndGeneration) {
  Put("k0");
  Put("k1");
  master_->EvictFromSegment(seg_, 2 * kMiB);
  ExpireLeases();
  // Another generation of region 3: not these records.
  EXPECT_EQ(master_->DropDiskReplicas(seg_, 3, 8, {"k0", "k1"}), 0u);
  EXPECT_EQ(master_->DropDiskReplicas(seg_, 4, 7, {"k0"}), 0u);
  EXPECT_EQ(master_->Stats().objects, 2u);
  EXPECT_EQ(master_->DropDiskReplicas(seg_, 3, 7, {"k0", "missing"}), 1u);
  EXPECT_EQ(master_->Exists({"k0", "k1"}), (std::vector<int>{0, 1}));
  EXPECT_EQ(master_->Stats().disk_replicas_dropped, 1u);
}

TEST_F(MasterDemotionTest, DroppingOneDiskMemberDropsTheGroup) {
  ReplicateConfig g;
  g.group_ids = {"g"};
  Put("a", g);
  Put("b", g);
  master_->EvictFromSegment(seg_, kMiB);
  ExpireLeases();
  EXPECT_EQ(master_->DropDiskReplicas(seg_, 3, 7, {"a"}), 2u);
  EXPECT_EQ(master_->Exists({"a", "b"}), (std::vector<int>{0, 0}));
  EXPECT_EQ(master_->Stats().groups, 0u);
}

TEST_F(MasterDemotionTest, AddDiskReplicasRegistersRecoveredRecords) {
  Put("kept");
  const std::vector<DiskRecord> recs = {
      {"r1", DiskLocation{1, 5, 4096, 100}, 11},
      {"kept", DiskLocation{1, 5, 8192, 100}, 12},
      {"", DiskLocation{1, 5, 12288, 100}, 13},
      {"off-page", DiskLocation{1, 5, 12289, 100}, 14},  // records start on a 4 KiB page
  };
  auto st = master_->AddDiskReplicas(seg_, recs);
  ASSERT_EQ(st.size(), 4u);
  EXPECT_TRUE(st[0].ok());
  EXPECT_EQ(st[1].code(), ErrorCode::OBJECT_ALREADY_EXISTS);
  EXPECT_EQ(st[2].code(), ErrorCode::INVALID_KEY);
  EXPECT_EQ(st[3].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_NE(st[3].message().find("12289"), std::string::npos) << st[3].message();
  EXPECT_EQ(master_->Exists({"off-page"})[0], 0);
  auto kept = master_->GetReplicas({"r1"});
  ASSERT_TRUE(kept[0].ok());
  EXPECT_EQ(kept[0]->replicas[0].disk.offset, 4096u);
  EXPECT_EQ(kept[0]->replicas[0].disk.generation, 5u);
  auto r = master_->GetReplicas({"r1"});
  ASSERT_TRUE(r[0].ok());
  EXPECT_EQ(r[0]->size, 100u);
  EXPECT_EQ(r[0]->checksum, 11u);
  EXPECT_EQ(r[0]->replicas[0].tier, ReplicaTier::kDisk);
  EXPECT_EQ(master_->AddDiskReplicas(99, recs)[0].code(), ErrorCode::SEGMENT_NOT_FOUND);
}

TEST_F(MasterDemotionTest, CopyToDiskKeepsMemoryAndLaterEvictionOnlyFreesIt) {
  Put("k");
  auto st = master_->CopyToDisk({"k", "missing"});
  EXPECT_TRUE(st[0].ok());
  EXPECT_EQ(st[1].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(mover_->calls.size(), 1u);
  EXPECT_EQ(Replicas("k").size(), 2u);
  EXPECT_EQ(Used(), kMiB);
  EXPECT_EQ(master_->Stats().written_behind, 1u);
  // Copying again is a no-op.
  EXPECT_TRUE(master_->CopyToDisk({"k"})[0].ok());
  EXPECT_EQ(mover_->calls.size(), 1u);
  ExpireLeases();
  mover_->calls.clear();
  EXPECT_EQ(master_->EvictFromSegment(seg_, kMiB), kMiB);
  EXPECT_TRUE(mover_->calls.empty());
  EXPECT_EQ(Replicas("k").size(), 1u);
}

TEST_F(MasterDemotionTest, CopyToDiskFailureKeepsTheObjectInMemory) {
  Put("k");
  mover_->fail = {"k"};
  EXPECT_EQ(master_->CopyToDisk({"k"})[0].code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_EQ(Replicas("k").size(), 1u);
  EXPECT_EQ(master_->Exists({"k"}), (std::vector<int>{1}));
}

TEST_F(MasterDemotionTest, WithoutMoverEvictionDrops) {
  master_->SetTierMover(seg_, nullptr);
  Put("k");
  EXPECT_EQ(master_->EvictFromSegment(seg_, kMiB), kMiB);
  EXPECT_TRUE(mover_->calls.empty());
  EXPECT_EQ(master_->Exists({"k"}), (std::vector<int>{0}));
  EXPECT_EQ(master_->CopyToDisk({"k"})[0].code(), ErrorCode::OBJECT_NOT_FOUND);
}

TEST_F(MasterDemotionTest, UnmountDropsDiskReplicasAndMover) {
  Put("k");
  master_->EvictFromSegment(seg_, kMiB);
  ASSERT_TRUE(master_->UnmountSegment(seg_).ok());
  EXPECT_EQ(master_->Exists({"k"}), (std::vector<int>{0}));
  EXPECT_EQ(master_->Stats().objects, 0u);
}

TEST_F(MasterDemotionTest, PutUnderPressureDemotesToMakeRoom) {
  for (int i = 0; i < 9; ++i) Put(DemotionKey(i));
  ExpireLeases();
  for (int i = 9; i < 20; ++i) Put(DemotionKey(i));
  // Every object is still stored: the old ones on disk.
  std::vector<std::string> keys;
  for (int i = 0; i < 20; ++i) keys.push_back(DemotionKey(i));
  for (int v : master_->Exists(keys)) EXPECT_EQ(v, 1);
  EXPECT_GE(master_->Stats().demoted_objects, 10u);
  EXPECT_LE(Used(), kCap);
}

TEST_F(MasterDemotionTest, PromotionNeedsAdmissionHitsAndBecomesReadableAtEnd) {
  Put("k");
  master_->EvictFromSegment(seg_, kMiB);
  ASSERT_EQ(Used(), 0u);
  // First disk hit: below min_hits = 2.
  EXPECT_EQ(master_->PromoteStart({"k"}, 2)[0].code(), ErrorCode::NO_AVAILABLE_HANDLE);
  auto p = master_->PromoteStart({"k", "missing"}, 2);
  ASSERT_TRUE(p[0].ok()) << p[0].status().ToString();
  EXPECT_EQ(p[1].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(Used(), kMiB);
  // Invisible until ended; a second promotion is refused meanwhile.
  EXPECT_EQ(Replicas("k").size(), 1u);
  EXPECT_EQ(master_->PromoteStart({"k"}, 1)[0].code(), ErrorCode::NO_AVAILABLE_HANDLE);
  EXPECT_EQ(master_->PromoteEnd({"k"}, {p[0]->put_id + 1}, {true})[0].code(),
            ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_TRUE(master_->PromoteEnd({"k"}, {p[0]->put_id}, {true})[0].ok());
  auto reps = Replicas("k");
  ASSERT_EQ(reps.size(), 2u);
  EXPECT_EQ(reps[0].tier, ReplicaTier::kMemory);
  EXPECT_EQ(reps[0].offset, p[0]->replicas[0].offset);
  EXPECT_EQ(master_->Stats().promoted_objects, 1u);
  // In memory again: no longer a candidate.
  EXPECT_EQ(master_->PromoteStart({"k"}, 1)[0].code(), ErrorCode::NO_AVAILABLE_HANDLE);
}

TEST_F(MasterDemotionTest, FailedOrOrphanedPromotionsFreeTheirRange) {
  Put("a");
  Put("b");
  master_->EvictFromSegment(seg_, 2 * kMiB);
  auto p = master_->PromoteStart({"a", "b"}, 1);
  ASSERT_TRUE(p[0].ok());
  ASSERT_TRUE(p[1].ok());
  EXPECT_EQ(Used(), 2 * kMiB);
  EXPECT_TRUE(master_->PromoteEnd({"a"}, {p[0]->put_id}, {false})[0].ok());
  EXPECT_EQ(Used(), kMiB);
  EXPECT_EQ(Replicas("a").size(), 1u);
  // b is removed while its range is being written: the range stays reserved until the
  // promotion ends, so the writer never scribbles over a new tenant.
  ASSERT_TRUE(master_->Remove("b", true).ok());
  EXPECT_EQ(Used(), kMiB);
  EXPECT_EQ(master_->PromoteEnd({"b"}, {p[1]->put_id}, {true})[0].code(),
            ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(Used(), 0u);
  // An abandoned promotion is reclaimed after put_timeout, and the object can promote again.
  auto q = master_->PromoteStart({"a"}, 1);
  ASSERT_TRUE(q[0].ok());
  clock_.Advance(Millis(31000));
  master_->ReclaimAbandonedPuts();
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(master_->PromoteEnd({"a"}, {q[0]->put_id}, {true})[0].code(),
            ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_TRUE(master_->PromoteStart({"a"}, 1)[0].ok());
}

}  // namespace
}  // namespace tierkv
