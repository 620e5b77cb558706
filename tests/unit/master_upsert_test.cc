// MasterService upserts (UpsertStart) and RemoveByRegex: versions swap
// atomically at PutEnd, the old version's space is held while a reader's lease lasts and
// freed by maintenance after it, and in-flight upserts are protected from eviction and
// removal.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/master_service.h"
#include "size_units.h"

namespace tierkv {
namespace {

enum class PutMode { kPut, kUpsert };

class MasterUpsertTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterOptions o;
    o.clock = &clock_;
    o.shards = 8;
    o.lease_ttl = Millis(1000);
    o.put_timeout = Millis(5000);
    master_ = std::make_unique<MasterService>(o);
    auto id = master_->MountSegment("seg", 64 * kKiB);
    ASSERT_TRUE(id.ok());
    seg_ = *id;
  }
  uint64_t Used() const { return master_->segments().Find(seg_)->allocator->used(); }
  Result<PutStartResult> Start(const std::string& key, uint64_t size, PutMode mode,
                               const ReplicateConfig& cfg = {}) {
    auto r = mode == PutMode::kUpsert ? master_->UpsertStart({key}, {size}, cfg)
                                      : master_->PutStart({key}, {size}, cfg);
    return std::move(r[0]);
  }
  Status End(const std::string& key, uint64_t put_id, uint64_t checksum) {
    return master_->PutEnd({key}, {put_id}, {checksum})[0];
  }
  void Put(const std::string& key, uint64_t size, uint64_t checksum, PutMode mode) {
    auto r = Start(key, size, mode);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_TRUE(End(key, r->put_id, checksum).ok());
  }

  ManualClock clock_;
  std::unique_ptr<MasterService> master_;
  SegmentId seg_ = 0;
};

TEST_F(MasterUpsertTest, MissingKeyIsAPlainPutAndExistingKeyGetsANewVersion) {
  Put("k", 4 * kKiB, 111, PutMode::kUpsert);
  auto v1 = master_->GetReplicas({"k"});
  ASSERT_TRUE(v1[0].ok());
  EXPECT_EQ(v1[0]->checksum, 111u);
  // A plain put of an existing key still fails.
  EXPECT_EQ(Start("k", 4 * kKiB, PutMode::kPut).code(), ErrorCode::OBJECT_ALREADY_EXISTS);

  auto started = Start("k", 8 * kKiB, PutMode::kUpsert);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  // Until its PutEnd the old version is what readers get.
  auto mid = master_->GetReplicas({"k"});
  ASSERT_TRUE(mid[0].ok());
  EXPECT_EQ(mid[0]->size, 4 * kKiB);
  EXPECT_EQ(mid[0]->checksum, 111u);
  EXPECT_EQ(master_->Exists({"k"})[0], 1);
  // A second upsert, a removal and a removal by regex wait for this one.
  EXPECT_EQ(Start("k", 1 * kKiB, PutMode::kUpsert).code(), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(master_->Remove("k", /*force=*/true).code(), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(*master_->RemoveByRegex("k", true), 0u);
  EXPECT_EQ(master_->RemoveAll(true), 0u);

  ASSERT_TRUE(End("k", started->put_id, 222).ok());
  auto v2 = master_->GetReplicas({"k"});
  ASSERT_TRUE(v2[0].ok());
  EXPECT_EQ(v2[0]->size, 8 * kKiB);
  EXPECT_EQ(v2[0]->checksum, 222u);
  EXPECT_NE(v2[0]->replicas[0].offset, v1[0]->replicas[0].offset);  // never written in place
  // Ending it again is an error; so is the first version's put id.
  EXPECT_EQ(End("k", started->put_id, 222).code(), ErrorCode::INVALID_WRITE);
}

// The object's own lease is not a field but its last access + the TTL (ObjectMeta::leased): a
// put's end grants none, and an upsert's swap during a lease neither ends nor extends it.
TEST_F(MasterUpsertTest, APutEndGrantsNoLeaseAndAnUpsertKeepsTheLeaseItFinds) {
  Put("fresh", 4 * kKiB, 1, PutMode::kPut);
  EXPECT_TRUE(master_->Remove("fresh", /*force=*/false).ok());  // not leased by its own put

  Put("k", 4 * kKiB, 1, PutMode::kPut);
  ASSERT_TRUE(master_->GetReplicas({"k"})[0].ok());  // leased until now + 1 s
  clock_.Advance(Millis(600));
  Put("k", 4 * kKiB, 2, PutMode::kUpsert);  // swapped while leased
  clock_.Advance(Millis(300));              // 0.9 s after the lease: still held
  EXPECT_EQ(master_->Remove("k", false).code(), ErrorCode::OBJECT_HAS_LEASE);
  clock_.Advance(Millis(150));  // 1.05 s: the lease ended when it was granted to
  EXPECT_TRUE(master_->Remove("k", false).ok());

  // A lease taken again renews it from that access.
  Put("k", 4 * kKiB, 3, PutMode::kPut);
  ASSERT_EQ(master_->Exists({"k"})[0], 1);
  clock_.Advance(Millis(900));
  ASSERT_EQ(master_->Exists({"k"})[0], 1);
  clock_.Advance(Millis(900));  // 1.8 s after the first, 0.9 s after the second
  EXPECT_EQ(master_->Remove("k", false).code(), ErrorCode::OBJECT_HAS_LEASE);
  clock_.Advance(Millis(200));
  EXPECT_TRUE(master_->Remove("k", false).ok());
}

TEST_F(MasterUpsertTest, OldSpaceIsHeldWhileLeasedAndFreedWhenTheLeaseEnds) {
  Put("k", 4 * kKiB, 1, PutMode::kPut);
  const uint64_t one = Used();
  // A reader takes a lease on version 1 (GetReplicas grants lease_ttl = 1 s).
  ASSERT_TRUE(master_->GetReplicas({"k"})[0].ok());
  Put("k", 4 * kKiB, 2, PutMode::kUpsert);
  EXPECT_EQ(Used(), 2 * one);  // the leased old version is still allocated
  clock_.Advance(Millis(500));
  master_->ReclaimAbandonedPuts();
  EXPECT_EQ(Used(), 2 * one);  // lease not over yet
  clock_.Advance(Millis(600));
  master_->ReclaimAbandonedPuts();
  EXPECT_EQ(Used(), one);  // freed once the last lease on it ended

  // Without a lease the old version goes at once.
  clock_.Advance(Millis(2000));
  Put("k", 4 * kKiB, 3, PutMode::kUpsert);
  EXPECT_EQ(Used(), one);
}

TEST_F(MasterUpsertTest, GroupLeasesHoldTheOldVersionToo) {
  ReplicateConfig grouped;
  grouped.group_ids = {"g"};
  auto a = Start("a", 4 * kKiB, PutMode::kPut, grouped);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(End("a", a->put_id, 1).ok());
  const uint64_t one = Used();
  ASSERT_TRUE(master_->GetReplicas({"a"})[0].ok());  // leases group g
  // The group must match: an upsert keeps the object's group.
  EXPECT_EQ(Start("a", 4 * kKiB, PutMode::kUpsert).code(), ErrorCode::INVALID_PARAMS);
  auto b = Start("a", 4 * kKiB, PutMode::kUpsert, grouped);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  ASSERT_TRUE(End("a", b->put_id, 2).ok());
  EXPECT_EQ(Used(), 2 * one);
  clock_.Advance(Millis(1100));
  master_->ReclaimAbandonedPuts();
  EXPECT_EQ(Used(), one);
}

TEST_F(MasterUpsertTest, RevokeAndAbandonedUpsertsKeepTheCurrentVersion) {
  Put("k", 4 * kKiB, 7, PutMode::kPut);
  const uint64_t one = Used();
  auto r = Start("k", 4 * kKiB, PutMode::kUpsert);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(Used(), 2 * one);
  ASSERT_TRUE(master_->PutRevoke({"k"}, {r->put_id})[0].ok());
  EXPECT_EQ(Used(), one);
  EXPECT_EQ(master_->GetReplicas({"k"})[0]->checksum, 7u);

  r = Start("k", 4 * kKiB, PutMode::kUpsert);
  ASSERT_TRUE(r.ok());
  clock_.Advance(Millis(6000));  // past put_timeout
  EXPECT_EQ(master_->ReclaimAbandonedPuts(), 1u);
  EXPECT_EQ(Used(), one);
  EXPECT_EQ(End("k", r->put_id, 8).code(), ErrorCode::INVALID_WRITE);
  EXPECT_EQ(master_->GetReplicas({"k"})[0]->checksum, 7u);
}

TEST_F(MasterUpsertTest, AnObjectWithAnUpsertInFlightIsNotEvicted) {
  Put("k", 16 * kKiB, 1, PutMode::kPut);
  auto r = Start("k", 16 * kKiB, PutMode::kUpsert);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(master_->EvictFromSegment(seg_, 64 * kKiB), 0u);
  ASSERT_TRUE(End("k", r->put_id, 2).ok());
  EXPECT_GT(master_->EvictFromSegment(seg_, 64 * kKiB), 0u);
}

TEST_F(MasterUpsertTest, UnmountDropsPendingUpserts) {
  Put("k", 4 * kKiB, 1, PutMode::kPut);
  auto r = Start("k", 4 * kKiB, PutMode::kUpsert);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(master_->UnmountSegment(seg_).ok());
  EXPECT_EQ(End("k", r->put_id, 2).code(), ErrorCode::OBJECT_NOT_FOUND);
}

TEST_F(MasterUpsertTest, RemoveByRegexMatchesLikeRegexSearch) {
  for (const char* key : {"user_session_1", "user_session_2", "other_user_session", "x"}) {
    Put(key, kKiB, 1, PutMode::kPut);
  }
  EXPECT_EQ(*master_->RemoveByRegex("^user_session_.*", false), 2u);
  EXPECT_EQ(master_->Exists({"other_user_session"})[0], 1);
  // Leased objects stay unless forced.
  ASSERT_EQ(master_->Exists({"x"})[0], 1);  // grants a lease
  EXPECT_EQ(*master_->RemoveByRegex("x", false), 0u);
  EXPECT_EQ(*master_->RemoveByRegex("x", true), 1u);
  EXPECT_EQ(*master_->RemoveByRegex("session", true), 1u);  // a match anywhere in the key
  auto bad = master_->RemoveByRegex("([", false);
  EXPECT_EQ(bad.code(), ErrorCode::INVALID_PARAMS);
}

}  // namespace
}  // namespace tierkv
