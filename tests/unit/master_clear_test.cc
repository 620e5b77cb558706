// MasterService::ClearReplicas (Mooncake's batch_replica_clear) and RemoveInNamespace (tenants'
// remove_all / remove_by_regex), driven by a ManualClock; TenantClient over an embedded client.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "client/client_impl.h"
#include "common/clock.h"
#include "connector/tenant_client.h"
#include "master/master_service.h"
#include "size_units.h"
#include "status_test_util.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv {
namespace {

constexpr Millis kClearTestTtl{1000};

class MasterClearTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterOptions o;
    o.clock = &clock_;
    o.lease_ttl = kClearTestTtl;
    o.shards = 4;
    master_ = std::make_unique<MasterService>(o);
    a_ = *master_->MountSegment("host-a:1@/sock-a", 16 * kMiB);
    b_ = *master_->MountSegment("host-b:2", 16 * kMiB);
  }
  void Put(const std::string& key, size_t replicas = 1) {
    ReplicateConfig c;
    c.replica_num = replicas;
    auto r = master_->PutStart({key}, {4096}, c);
    ASSERT_TRUE(r[0].ok()) << r[0].status().ToString();
    ASSERT_TRUE(master_->PutEnd({key}, {r[0]->put_id}, {0})[0].ok());
  }
  std::vector<ErrorCode> Clear(const std::vector<std::string>& keys, const std::string& seg = "") {
    std::vector<ErrorCode> out;
    for (const Status& st : master_->ClearReplicas(keys, seg)) out.push_back(st.code());
    return out;
  }
  size_t Replicas(const std::string& key) {
    auto r = master_->GetReplicas({key});
    return r[0].ok() ? r[0]->replicas.size() : 0;
  }

  ManualClock clock_;
  std::unique_ptr<MasterService> master_;
  SegmentId a_ = 0, b_ = 0;
};

TEST_F(MasterClearTest, AFreshOrLeasedObjectIsSkippedAnExpiredOneCleared) {
  Put("k");
  Put("j");
  EXPECT_EQ(Clear({"k", "missing", ""}),
            (std::vector<ErrorCode>{ErrorCode::OBJECT_HAS_LEASE, ErrorCode::OBJECT_NOT_FOUND,
                                    ErrorCode::INVALID_KEY}));
  clock_.Advance(kClearTestTtl + Millis(1));
  ASSERT_EQ(master_->Exists({"j"}), std::vector<int>{1});  // a reader's lease on j
  EXPECT_EQ(Clear({"k", "j"}),
            (std::vector<ErrorCode>{ErrorCode::OK, ErrorCode::OBJECT_HAS_LEASE}));
  EXPECT_EQ(master_->Exists({"k"}), std::vector<int>{0});
}

TEST_F(MasterClearTest, ASegmentNameDropsOnlyThatSegmentsReplicaThenTheObject) {
  Put("r", 2);
  clock_.Advance(kClearTestTtl + Millis(1));
  EXPECT_EQ(Clear({"r"}, "nobody:9"), std::vector<ErrorCode>{ErrorCode::SEGMENT_NOT_FOUND});
  // "host-a:1" names the segment mounted as "host-a:1@/sock-a" (what get_hostname() reports).
  EXPECT_EQ(Clear({"r"}, "host-a:1"), std::vector<ErrorCode>{ErrorCode::OK});
  clock_.Advance(kClearTestTtl + Millis(1));
  EXPECT_EQ(Replicas("r"), 1u);  // the read above leased it again
  clock_.Advance(kClearTestTtl + Millis(1));
  EXPECT_EQ(Clear({"r"}, "host-a:1"), std::vector<ErrorCode>{ErrorCode::SEGMENT_NOT_FOUND});
  EXPECT_EQ(Clear({"r"}, "host-b:2"), std::vector<ErrorCode>{ErrorCode::OK});
  EXPECT_EQ(master_->Exists({"r"}), std::vector<int>{0});
  EXPECT_EQ(master_->segments().Find(a_)->allocator->used(), 0u);
  EXPECT_EQ(master_->segments().Find(b_)->allocator->used(), 0u);
}

TEST_F(MasterClearTest, RemoveInNamespaceReachesOneNamespaceOnly) {
  const std::string alpha = *TenantKeyPrefix("alpha");
  for (const std::string& k : {std::string("x1"), std::string("x2"), alpha + "x1", alpha + "y"}) {
    Put(k);
  }
  EXPECT_EQ(*master_->RemoveInNamespace(alpha, "^x", false), 1u);  // "^" anchors the rest
  EXPECT_EQ(*master_->RemoveInNamespace("", "", false), 2u);       // keys of no namespace
  EXPECT_EQ(master_->Exists({alpha + "y"}), std::vector<int>{1});
  EXPECT_EQ(master_->RemoveInNamespace("", "([", false).code(), ErrorCode::INVALID_PARAMS);
}

TEST(TenantKeyPrefixTest, NamesAreCheckedAndDefaultHasNone) {
  EXPECT_EQ(*TenantKeyPrefix("default"), "");
  EXPECT_EQ(*TenantKeyPrefix("t-1.a_b"), "\x1dt-1.a_b\x1d");
  for (const char* bad : {"", "a/b", "a b", "\x1d"}) {
    EXPECT_EQ(TenantKeyPrefix(bad).code(), ErrorCode::INVALID_PARAMS) << bad;
  }
  EXPECT_EQ(TenantKeyPrefix(std::string(65, 'a')).code(), ErrorCode::INVALID_PARAMS);
}

TEST(TenantClientTest, TenantsShareTheSameKeysWithoutSeeingEachOther) {
  Config c;
  c.global_segment_size = 8ull << 20;
  c.use_huge_pages = false;
  auto master = std::make_shared<InProcessMaster>(MasterOptions{}, Millis(20));
  auto made = ClientImpl::CreateEmbedded(c, master);
  ASSERT_TRUE(made.ok()) << made.status().ToString();
  std::shared_ptr<Client> plain(std::move(made).value());
  TenantClient a(plain, *TenantKeyPrefix("a")), b(plain, *TenantKeyPrefix("b"));
  const std::string va = "alpha", vb = "beta!";
  ASSERT_EQ(a.Put("k", va.data(), va.size()), kOk);
  ASSERT_EQ(b.Put("k", vb.data(), vb.size()), kOk);
  EXPECT_EQ(plain->BatchIsExist({"k"}), std::vector<int>{0});
  char out[8] = {};
  EXPECT_EQ(a.Get("k", out, sizeof(out)), 5);
  EXPECT_EQ(std::string(out, 5), va);
  EXPECT_EQ(b.Get("k", out, sizeof(out)), 5);
  EXPECT_EQ(std::string(out, 5), vb);
  EXPECT_EQ(a.RemoveAll(true), 1);
  EXPECT_EQ(a.BatchIsExist({"k"}), std::vector<int>{0});
  EXPECT_EQ(b.BatchIsExist({"k"}), std::vector<int>{1});
  EXPECT_EQ(b.RemoveByRegex("^k$", true), 1);
}

}  // namespace
}  // namespace tierkv
