// MasterService read leases, driven by a ManualClock (no sleeps).
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "master/master_service.h"
#include "size_units.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {
namespace {

constexpr Millis kLeaseTtl{10000};

class MasterLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterOptions o;
    o.clock = &clock_;
    o.lease_ttl = kLeaseTtl;
    o.shards = 8;
    master_ = std::make_unique<MasterService>(o);
    auto seg = master_->MountSegment("seg", 16 * kMiB);
    ASSERT_TRUE(seg.ok());
    seg_ = *seg;
  }
  void Put(const std::string& key, uint64_t size = 1024) {
    auto r = master_->PutStart({key}, {size}, {});
    ASSERT_TRUE(r[0].ok()) << r[0].status().ToString();
    ASSERT_TRUE(master_->PutEnd({key}, {r[0]->put_id}, {0})[0].ok());
  }
  ErrorCode RemoveCode(const std::string& key) { return master_->Remove(key, false).code(); }

  ManualClock clock_;
  std::unique_ptr<MasterService> master_;
  SegmentId seg_ = 0;
};

TEST_F(MasterLeaseTest, FreshObjectHasNoLease) {
  Put("k");
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OK);
  EXPECT_EQ(master_->Stats().lease_grants, 0u);
}

TEST_F(MasterLeaseTest, ExistsGrantsLeaseOfTtl) {
  Put("k");
  ASSERT_EQ(master_->Exists({"k"}), std::vector<int>{1});
  EXPECT_EQ(master_->Stats().lease_grants, 1u);
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OBJECT_HAS_LEASE);
  clock_.Advance(kLeaseTtl - Millis(1));
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OBJECT_HAS_LEASE);
  clock_.Advance(Millis(2));  // ttl + 1 ms after the grant
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OK);
  EXPECT_EQ(master_->Exists({"k"}), std::vector<int>{0});
}

TEST_F(MasterLeaseTest, ExistsOverViewsAnswersAndLeasesAsExists) {
  Put("k");
  auto pending = master_->PutStart({"pending"}, {1024}, {});
  ASSERT_TRUE(pending[0].ok());
  const std::string bytes = "k|pending|missing|";
  const std::string_view views[] = {std::string_view(bytes).substr(0, 1),
                                    std::string_view(bytes).substr(2, 7),
                                    std::string_view(bytes).substr(10, 7), std::string_view()};
  EXPECT_EQ(master_->ExistsViews(views),
            (std::vector<int>{1, 0, 0, ToInt(ErrorCode::INVALID_KEY)}));
  EXPECT_EQ(master_->Exists({"k", "pending", "missing", ""}),
            (std::vector<int>{1, 0, 0, ToInt(ErrorCode::INVALID_KEY)}));
  EXPECT_EQ(master_->Stats().lease_grants, 2u);
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OBJECT_HAS_LEASE);
}

TEST_F(MasterLeaseTest, GetReplicasGrantsLeaseAndReportsDeadline) {
  Put("k");
  clock_.Advance(Millis(1234));
  const SteadyTime now = clock_.Now();
  auto r = master_->GetReplicas({"k"});
  ASSERT_TRUE(r[0].ok());
  EXPECT_EQ(r[0]->lease_deadline, now + kLeaseTtl);
  EXPECT_EQ(master_->Stats().lease_grants, 1u);
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OBJECT_HAS_LEASE);
  clock_.Advance(kLeaseTtl + Millis(1));
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OK);
}

TEST_F(MasterLeaseTest, NewGrantExtendsLease) {
  Put("k");
  ASSERT_EQ(master_->Exists({"k"}), std::vector<int>{1});
  clock_.Advance(kLeaseTtl / 2);
  const SteadyTime second = clock_.Now();
  auto r = master_->GetReplicas({"k"});
  ASSERT_TRUE(r[0].ok());
  EXPECT_EQ(r[0]->lease_deadline, second + kLeaseTtl);
  // Past the first lease's deadline, still inside the second one.
  clock_.Advance(kLeaseTtl / 2 + Millis(1));
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OBJECT_HAS_LEASE);
  clock_.Advance(kLeaseTtl / 2 - Millis(2));
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OBJECT_HAS_LEASE);
  clock_.Advance(Millis(2));
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OK);
  EXPECT_EQ(master_->Stats().lease_grants, 2u);
}

TEST_F(MasterLeaseTest, MissingAndPendingObjectsGetNoLease) {
  auto r = master_->PutStart({"pending"}, {100}, {});
  ASSERT_TRUE(r[0].ok());
  EXPECT_EQ(master_->Exists({"pending", "missing"}), (std::vector<int>{0, 0}));
  auto g = master_->GetReplicas({"pending", "missing"});
  EXPECT_EQ(g[0].code(), ErrorCode::REPLICA_IS_NOT_READY);
  EXPECT_EQ(g[1].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(master_->Stats().lease_grants, 0u);
  // Ended right away, the object is not leased by the earlier lookups.
  ASSERT_TRUE(master_->PutEnd({"pending"}, {r[0]->put_id}, {0})[0].ok());
  EXPECT_EQ(RemoveCode("pending"), ErrorCode::OK);
}

TEST_F(MasterLeaseTest, LeasesArePerObject) {
  Put("a");
  Put("b");
  ASSERT_EQ(master_->Exists({"a"}), std::vector<int>{1});
  EXPECT_EQ(RemoveCode("a"), ErrorCode::OBJECT_HAS_LEASE);
  EXPECT_EQ(RemoveCode("b"), ErrorCode::OK);
}

TEST_F(MasterLeaseTest, LeasedObjectsAreNotEvictedUntilExpiry) {
  for (int i = 0; i < 8; ++i) Put("k" + std::to_string(i), kMiB);
  // Lease the even keys, one batch through each read call.
  ASSERT_EQ(master_->Exists({"k0", "k2"}), (std::vector<int>{1, 1}));
  auto g = master_->GetReplicas({"k4", "k6"});
  ASSERT_TRUE(g[0].ok() && g[1].ok());
  // Ask for far more than exists: only the unleased half can go.
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 4 * kMiB);
  EXPECT_EQ(master_->Stats().evicted_objects, 4u);
  EXPECT_EQ(master_->segments().Find(seg_)->allocator->used(), 4 * kMiB);

  clock_.Advance(kLeaseTtl - Millis(1));
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 0u);
  clock_.Advance(Millis(2));
  EXPECT_EQ(master_->EvictFromSegment(seg_, 100 * kMiB), 4 * kMiB);
  EXPECT_EQ(master_->segments().Find(seg_)->allocator->used(), 0u);
  EXPECT_EQ(master_->Stats().objects, 0u);
}

TEST_F(MasterLeaseTest, CustomTtl) {
  MasterOptions o;
  o.clock = &clock_;
  o.lease_ttl = Millis(250);
  master_ = std::make_unique<MasterService>(o);
  ASSERT_TRUE(master_->MountSegment("s", kMiB).ok());
  Put("k");
  const SteadyTime now = clock_.Now();
  auto r = master_->GetReplicas({"k"});
  ASSERT_TRUE(r[0].ok());
  EXPECT_EQ(r[0]->lease_deadline, now + Millis(250));
  clock_.Advance(Millis(249));
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OBJECT_HAS_LEASE);
  clock_.Advance(Millis(2));
  EXPECT_EQ(RemoveCode("k"), ErrorCode::OK);
}

}  // namespace
}  // namespace tierkv
