// Tenants with their own credentials and dedicated stores (issue 25): a tenant's token acts in
// its key namespace only — every call — and its objects live on the stores dedicated to it,
// whose data ports accept its token alone; a put over the tenant's room evicts the tenant's
// own objects, never another's; the admin's token sees the whole cluster.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "distributed_test_util.h"
#include "http_test_util.h"
#include "process_test_util.h"
#include "rpc/remote_master.h"
#include "transport/tcp_segment_client.h"

namespace tierkv {
namespace {

using dist_test::GetKey;
using dist_test::PutKey;
using dist_test::Requester;
using dist_test::RequesterConfig;
using http_test::HttpGet;
using http_test::HttpResponse;
using http_test::Sample;

std::string Key(const std::string& tenant, const std::string& key) {
  return std::string(1, kKeyNamespaceMark) + tenant + std::string(1, kKeyNamespaceMark) + key;
}

class TenantTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/tierkv-tenant-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    for (const char* name : {"cluster", "store", "admin", "alpha", "beta"}) {
      const std::string path = dir_ + "/" + name + ".token";
      std::ofstream(path) << name << "-token-0123456789abcdef\n";
      chmod(path.c_str(), 0600);
    }
    std::ofstream(dir_ + "/tenants.json")
        << R"({"tenants": {"alpha": {"token_file": ")" << Token("alpha")
        << R"("}, "beta": {"token_file": ")" << Token("beta") << R"("}}})";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Token(const std::string& name) const { return dir_ + "/" + name + ".token"; }
  std::unique_ptr<MasterProcess> Store(const MasterProcess& master, const std::string& tenant,
                                       const std::string& accepted) {
    std::vector<std::string> extra = {"--token-file", Token("store"), "--accept-token-file",
                                      Token(accepted)};
    if (!tenant.empty()) extra.insert(extra.end(), {"--tenant", tenant});
    return dist_test::StartStore(master, "16MiB", false, extra);
  }
  Config As(const MasterProcess& master, const std::string& credential) {
    Config config = RequesterConfig(master, "tcp");
    config.cluster_token_file = Token(credential);
    return config;
  }
  std::string dir_;
};

TEST_F(TenantTest, ATenantActsInItsOwnNamespaceOnItsOwnStoresOnly) {
  auto master = dist_test::StartMaster(
      {"--token-file", Token("cluster"), "--store-token-file", Token("store"), "--tenants-file",
       dir_ + "/tenants.json", "--admin-token-file", Token("admin")},
      0, /*metrics=*/true);
  ASSERT_NE(master, nullptr);
  auto alpha_store = Store(*master, "alpha", "alpha");
  auto beta_store = Store(*master, "beta", "beta");
  auto shared_store = Store(*master, "", "cluster");
  ASSERT_TRUE(alpha_store && beta_store && shared_store);
  auto alpha = Requester(As(*master, "alpha"));
  auto beta = Requester(As(*master, "beta"));
  auto member = Requester(As(*master, "cluster"));
  ASSERT_TRUE(alpha && beta && member);

  // Each in its own namespace, on its own store.
  ASSERT_EQ(PutKey(*alpha, Key("alpha", "k"), 1), 0);
  ASSERT_EQ(PutKey(*beta, Key("beta", "k"), 2), 0);
  ASSERT_EQ(PutKey(*member, "k", 3), 0);
  auto where = alpha->BatchGetReplicaDesc({Key("alpha", "k")});
  ASSERT_TRUE(where[0].ok()) << where[0].status().ToString();
  const std::string alpha_segment =
      alpha_store->segment_name().substr(0, alpha_store->segment_name().find('@'));
  EXPECT_EQ((*where[0])[0].segment_name.substr(0, alpha_segment.size()), alpha_segment);
  auto shared_where = member->BatchGetReplicaDesc({"k"});
  ASSERT_TRUE(shared_where[0].ok());
  const std::string shared_segment =
      shared_store->segment_name().substr(0, shared_store->segment_name().find('@'));
  EXPECT_EQ((*shared_where[0])[0].segment_name.substr(0, shared_segment.size()), shared_segment);

  // Every call outside the namespace is refused, naming the tenant.
  EXPECT_EQ(PutKey(*alpha, "k-outside", 4), ToInt(ErrorCode::UNAUTHENTICATED));
  EXPECT_EQ(PutKey(*alpha, Key("beta", "intruder"), 4), ToInt(ErrorCode::UNAUTHENTICATED));
  EXPECT_EQ(GetKey(*alpha, Key("beta", "k"), 2), ToInt(ErrorCode::UNAUTHENTICATED));
  EXPECT_EQ(alpha->BatchIsExist({Key("beta", "k")})[0], ToInt(ErrorCode::UNAUTHENTICATED));
  EXPECT_FALSE(alpha->BatchGetReplicaDesc({Key("beta", "k")})[0].ok());
  EXPECT_EQ(alpha->Remove(Key("beta", "k"), true), ToInt(ErrorCode::UNAUTHENTICATED));
  EXPECT_EQ(member->BatchIsExist({Key("alpha", "k")})[0], ToInt(ErrorCode::UNAUTHENTICATED));
  EXPECT_LT(alpha->RemoveInNamespace(Key("beta", ""), "", true), 0);
  // remove_all and remove_by_regex reach the caller's namespace only.
  EXPECT_EQ(beta->RemoveByRegex(".*", true), 1);
  ASSERT_EQ(PutKey(*beta, Key("beta", "k"), 2), 0);
  EXPECT_EQ(alpha->RemoveAll(true), 1);
  EXPECT_EQ(beta->BatchIsExist({Key("beta", "k")})[0], 1);
  EXPECT_EQ(member->BatchIsExist({"k"})[0], 1);

  // Beta's token does not open alpha's store's data port: no raw read of alpha's bytes.
  transport::UcxTransportOptions beta_data;
  beta_data.tokens = TokenSet::FromSecrets({"beta-token-0123456789abcdef"});
  auto raw = transport::TcpSegmentClient::Connect(
      "127.0.0.1:" + std::to_string(proc_test::DataPort(*alpha_store)), alpha_segment,
      std::chrono::milliseconds(5000), beta_data);
  ASSERT_FALSE(raw.ok());
  EXPECT_EQ(raw.code(), ErrorCode::UNAUTHENTICATED);

  // The admin sees the whole cluster; a tenant only its own objects.
  auto stats_as = [&](const std::string& credential) {
    ControlPlaneSecurity security;
    security.tokens = TokenSet::Load(Token(credential)).value();
    auto stats = RemoteMaster::QueryStats(master->address(), Millis(5000), security);
    EXPECT_TRUE(stats.ok()) << stats.status().ToString();
    return stats.ok() ? stats->master.objects : uint64_t{999};
  };
  EXPECT_EQ(stats_as("admin"), 2u);  // beta's and the default tenant's
  EXPECT_EQ(stats_as("beta"), 1u);
  EXPECT_EQ(stats_as("alpha"), 0u);
  EXPECT_EQ(stats_as("cluster"), 1u);  // the default tenant's
  // Per-tenant metrics.
  HttpResponse metrics = HttpGet(master->metrics_port(), "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(Sample(metrics.body, "tierkv_master_tenant_objects{tenant=\"beta\"}"), 1.0)
      << metrics.body;
  EXPECT_EQ(Sample(metrics.body, "tierkv_master_tenant_objects{tenant=\"default\"}"), 1.0);
  EXPECT_EQ(Sample(metrics.body, "tierkv_master_tenant_segment_capacity_bytes{tenant=\"alpha\"}"),
            16.0 * 1024 * 1024);
}

// A tenant's room is its dedicated stores: puts beyond it evict the tenant's own objects, and
// never another tenant's.
TEST_F(TenantTest, APutOverATenantsRoomEvictsOnlyThatTenantsObjects) {
  auto master = dist_test::StartMaster({"--token-file", Token("cluster"), "--store-token-file",
                                        Token("store"), "--tenants-file", dir_ + "/tenants.json"});
  ASSERT_NE(master, nullptr);
  auto alpha_store = Store(*master, "alpha", "alpha");
  auto beta_store = Store(*master, "beta", "beta");
  ASSERT_TRUE(alpha_store && beta_store);
  auto alpha = Requester(As(*master, "alpha"));
  auto beta = Requester(As(*master, "beta"));
  ASSERT_TRUE(alpha && beta);
  for (int i = 0; i < 20; ++i) {  // 5 MiB of beta's 16
    ASSERT_EQ(PutKey(*beta, Key("beta", std::to_string(i)), i), 0);
  }
  for (int i = 0; i < 160; ++i) {  // 40 MiB into alpha's 16: its own objects make room
    ASSERT_EQ(PutKey(*alpha, Key("alpha", std::to_string(i)), i), 0) << i;
  }
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(GetKey(*beta, Key("beta", std::to_string(i)), i),
              static_cast<int64_t>(dist_test::kObject))
        << i;
  }
  EXPECT_EQ(GetKey(*alpha, Key("alpha", "159"), 159), static_cast<int64_t>(dist_test::kObject));
  EXPECT_LT(alpha->BatchIsExist({Key("alpha", "0")})[0], 1);  // evicted
}

}  // namespace
}  // namespace tierkv
