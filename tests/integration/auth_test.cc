// Only members get in (issue 25), against the real binaries on 127.0.0.1: a master and a store
// started with a cluster token refuse every process without it — a store that would register
// a segment, a requester, `tierkv stat` — with UNAUTHENTICATED, count the refusals in their
// metrics, and never write the token to their logs, metrics or stat output; a token file others
// can read is refused; every numeric flag out of range and every bad HOST:PORT exits 2, naming
// the flag.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "distributed_test_util.h"
#include "http_test_util.h"
#include "process_test_util.h"
#include "rpc/etcd_client.h"
#include "rpc/etcd_process.h"
#include "rpc/remote_master.h"

namespace tierkv {
namespace {

using dist_test::GetKey;
using dist_test::PutKey;
using dist_test::Requester;
using dist_test::RequesterConfig;
using http_test::HttpGet;
using http_test::HttpResponse;
using http_test::Sample;
using proc_test::RunToExit;

constexpr char kSecret[] = "auth-test-token-5f1c0e9a7b3d";

class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/tierkv-auth-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    token_ = Write("token", std::string(kSecret) + "\n", 0600);
    wrong_ = Write("wrong", "another-cluster-token-0123\n", 0600);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& content, mode_t mode) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << content;
    chmod(path.c_str(), mode);
    return path;
  }
  std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::unique_ptr<MasterProcess> Start(const std::string& command, std::vector<std::string> args,
                                       bool metrics, const std::string& log) {
    MasterProcessOptions options;
    options.binary = dist_test::TestBinary();
    options.command = command;
    options.args = std::move(args);
    options.args.insert(options.args.end(), {"--metrics-port", metrics ? "0" : "-1"});
    options.expect_metrics = metrics;
    options.stderr_path = log;
    auto started = MasterProcess::Start(options);
    return started.ok() ? std::move(started).value() : nullptr;
  }
  std::string dir_, token_, wrong_;
};

TEST_F(AuthTest, WithoutTheTokenNothingGetsIn) {
  const std::string master_log = dir_ + "/master.log", store_log = dir_ + "/store.log";
  auto master = Start("master", {"--port", "0", "--token-file", token_}, true, master_log);
  ASSERT_NE(master, nullptr) << Read(master_log);
  // A store without the token, or with another cluster's, cannot register its segment.
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, std::vector<std::string>{"--token-file", wrong_}}) {
    std::vector<std::string> args = {"store", "--master",      master->address(), "--segment-size",
                                     "16MiB", "--small-pages", "--metrics-port",  "-1"};
    args.insert(args.end(), extra.begin(), extra.end());
    proc_test::Exit e = RunToExit(args);
    EXPECT_EQ(e.code, 1) << e.output;
    EXPECT_NE(e.output.find("UNAUTHENTICATED"), std::string::npos) << e.output;
  }
  auto store = Start("store",
                     {"--master", master->address(), "--segment-size", "32MiB", "--small-pages",
                      "--token-file", token_},
                     true, store_log);
  ASSERT_NE(store, nullptr) << Read(store_log);

  // A requester with the token: byte-exact over the TCP data plane (which proves it too).
  Config config = RequesterConfig(*master, "tcp");
  config.cluster_token_file = token_;
  {
    auto requester = Requester(config);
    ASSERT_NE(requester, nullptr);
    ASSERT_EQ(PutKey(*requester, "member", 3), 0);
    EXPECT_EQ(GetKey(*requester, "member", 3), static_cast<int64_t>(dist_test::kObject));
  }
  // Without it, or with a wrong one: refused at Client::Create, naming the problem.
  for (const std::string& file : {std::string(), wrong_}) {
    Config bad = RequesterConfig(*master, "tcp");
    bad.cluster_token_file = file;
    auto client = Client::Create(bad);
    ASSERT_FALSE(client.ok());
    EXPECT_EQ(client.code(), ErrorCode::UNAUTHENTICATED) << client.status().ToString();
    EXPECT_NE(client.status().message().find("cluster token"), std::string::npos);
  }
  // A token file others can read is refused, naming its mode.
  Config public_token = RequesterConfig(*master, "tcp");
  public_token.cluster_token_file = Write("public", std::string(kSecret) + "\n", 0644);
  auto refused = Client::Create(public_token);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.code(), ErrorCode::INVALID_CONFIG);
  EXPECT_NE(refused.status().message().find("0644"), std::string::npos);

  // tierkv stat: without the token exit 1 (UNAUTHENTICATED); with it, the summary.
  proc_test::Exit stat = RunToExit({"stat", "--master", master->address()});
  EXPECT_EQ(stat.code, 1) << stat.output;
  EXPECT_NE(stat.output.find("UNAUTHENTICATED"), std::string::npos);
  proc_test::Exit stat_ok =
      RunToExit({"stat", "--master", master->address(), "--token-file", token_, "--json"});
  EXPECT_EQ(stat_ok.code, 0) << stat_ok.output;
  // The metadata channel's port (a token-holding master opens it; 0 would be none).
  const size_t meta = stat_ok.output.find("\"meta_port\":");
  ASSERT_NE(meta, std::string::npos) << stat_ok.output;
  EXPECT_NE(stat_ok.output.compare(meta + 12, 1, "0"), 0) << stat_ok.output;
  proc_test::Exit stat_bad =
      RunToExit({"stat", "--master", master->address(), "--token-file", wrong_});
  EXPECT_EQ(stat_bad.code, 1);

  // Counted in the metrics, by plane; the token nowhere.
  HttpResponse metrics = HttpGet(master->metrics_port(), "/metrics");
  ASSERT_EQ(metrics.status, 200);
  auto refused_calls =
      Sample(metrics.body, "tierkv_master_unauthenticated_total{plane=\"control\"}");
  ASSERT_TRUE(refused_calls.has_value()) << metrics.body;
  EXPECT_GE(*refused_calls, 6.0);
  HttpResponse store_metrics = HttpGet(store->metrics_port(), "/metrics");
  ASSERT_EQ(store_metrics.status, 200);
  EXPECT_TRUE(
      Sample(store_metrics.body, "tierkv_store_unauthenticated_total{plane=\"data\"}").has_value())
      << store_metrics.body;
  master->Stop();
  store->Stop();
  for (const std::string& text : {Read(master_log), Read(store_log), metrics.body,
                                  store_metrics.body, stat.output, stat_ok.output}) {
    EXPECT_EQ(text.find(kSecret), std::string::npos) << text;
  }
  EXPECT_NE(Read(master_log).find("refused a call"), std::string::npos);
}

TEST_F(AuthTest, WithoutATokenTheProcessesSayWhoIsTrusted) {
  const std::string master_log = dir_ + "/master.log", store_log = dir_ + "/store.log";
  auto master = Start("master", {"--port", "0"}, false, master_log);
  ASSERT_NE(master, nullptr);
  auto store =
      Start("store", {"--master", master->address(), "--segment-size", "16MiB", "--small-pages"},
            false, store_log);
  ASSERT_NE(store, nullptr);
  master->Stop();
  store->Stop();
  EXPECT_NE(Read(master_log).find("no cluster token (--token-file): anyone who reaches"),
            std::string::npos);
  EXPECT_NE(Read(store_log).find("no cluster token (--token-file): anyone who reaches"),
            std::string::npos);
}

// Each numeric flag of each command out of its range, and each bad HOST:PORT: exit 2, the
// message names the flag; nothing is started.
TEST_F(AuthTest, EveryFlagOutOfRangeExitsTwoNamingIt) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"master", "--port", "70000"}, "--port"},
      {{"master", "--port", "-1"}, "--port"},
      {{"master", "--lease-ttl-ms", "0"}, "--lease-ttl-ms"},
      {{"master", "--lease-ttl-ms", "86400001"}, "--lease-ttl-ms"},
      {{"master", "--put-timeout-ms", "-5"}, "--put-timeout-ms"},
      {{"master", "--put-timeout-ms", "0"}, "--put-timeout-ms"},
      {{"master", "--soft-pin-ttl-ms", "-1"}, "--soft-pin-ttl-ms"},
      {{"master", "--promote-min-hits", "1000001"}, "--promote-min-hits"},
      {{"master", "--high-watermark", "1.5"}, "--high-watermark"},
      {{"master", "--eviction-ratio", "-0.1"}, "--eviction-ratio"},
      {{"master", "--eviction-ratio", "0"}, "--eviction-ratio"},
      {{"master", "--client-ttl-ms", "0"}, "--client-ttl-ms"},
      {{"master", "--tier-move-timeout-ms", "0"}, "--tier-move-timeout-ms"},
      {{"master", "--shards", "0"}, "--shards"},
      {{"master", "--shards", "4097"}, "--shards"},
      {{"master", "--metrics-port", "65536"}, "--metrics-port"},
      {{"master", "--ha-lease-ttl-s", "0"}, "--ha-lease-ttl-s"},
      {{"master", "--free-ack-wait-ms", "-1"}, "--free-ack-wait-ms"},
      {{"master", "--idle-timeout-ms", "10"}, "--idle-timeout-ms"},
      {{"master", "--advertise", "127.0.0.1:99999"}, "--advertise"},
      {{"master", "--ha", "etcd://127.0.0.1:99999"}, "99999"},
      {{"store", "--master", "127.0.0.1:99999"}, "99999"},
      {{"store", "--master", "127.0.0.1:0"}, "master_server_address"},
      {{"store", "--master", "127.0.0.1:1", "--metrics-port", "65536"}, "--metrics-port"},
      {{"store", "--master", "127.0.0.1:1", "--segment-size", "0"}, "--segment-size"},
      {{"store", "--master", "127.0.0.1:1", "--hostname", "node7:99999"}, "local_hostname"},
      {{"stat", "--master", "127.0.0.1:99999"}, "--master"},
      {{"stat", "--master", "127.0.0.1:1", "--timeout-ms", "0"}, "--timeout-ms"},
  };
  for (const auto& [args, flag] : cases) {
    proc_test::Exit e = RunToExit(args);
    std::string line;
    for (const std::string& a : args) line += a + " ";
    EXPECT_EQ(e.code, 2) << line << "\n" << e.output;
    EXPECT_NE(e.output.find(flag), std::string::npos) << line << "\n" << e.output;
  }
  // A token file others can read: the master refuses to start, naming the mode.
  const std::string public_token = Write("public", std::string(kSecret) + "\n", 0644);
  proc_test::Exit e = RunToExit({"master", "--port", "0", "--token-file", public_token});
  EXPECT_EQ(e.code, 2) << e.output;
  EXPECT_NE(e.output.find("mode 0644"), std::string::npos) << e.output;
  EXPECT_EQ(e.output.find(kSecret), std::string::npos);
}

// The flag wins over the config's key, and a line says so.
TEST_F(AuthTest, AStoreSaysWhenAFlagOverridesItsConfig) {
  const std::string master_log = dir_ + "/master.log", store_log = dir_ + "/store.log";
  auto master = Start("master", {"--port", "0"}, false, master_log);
  ASSERT_NE(master, nullptr);
  const std::string config = Write("store.json", R"({"global_segment_size": "24MiB"})", 0600);
  auto store = Start("store",
                     {"--master", master->address(), "--config", config, "--segment-size", "16MiB",
                      "--small-pages"},
                     false, store_log);
  ASSERT_NE(store, nullptr) << Read(store_log);
  EXPECT_NE(store->segment_name().size(), 0u);
  store->Stop();
  EXPECT_NE(Read(store_log).find("--segment-size 16777216 overrides the config's "
                                 "global_segment_size 25165824"),
            std::string::npos)
      << Read(store_log);
  // Without the flag, the config's size is used (it was silently replaced by 1 GiB before).
  auto sized = Start("store", {"--master", master->address(), "--config", config, "--small-pages"},
                     false, store_log);
  ASSERT_NE(sized, nullptr);
  proc_test::Exit stat = RunToExit({"stat", "--master", master->address(), "--json"});
  EXPECT_NE(stat.output.find("25165824"), std::string::npos) << stat.output;
}

}  // namespace
}  // namespace tierkv

namespace tierkv {
namespace {

// A CA, a master certificate for 127.0.0.1 and a client certificate, made with Debian's
// openssl as docs/security.md shows. False (and the output) when openssl fails.
bool MakeCertificates(const std::string& dir, std::string* output) {
  const std::string script =
      "set -e; cd '" + dir +
      "'; "
      "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=tierkv-test-ca "
      "-keyout ca.key -out ca.pem; "
      "openssl req -newkey rsa:2048 -nodes -subj /CN=tierkv-master -keyout master.key "
      "-out master.csr; "
      "printf 'subjectAltName=IP:127.0.0.1' > san.ext; "
      "openssl x509 -req -in master.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
      "-extfile san.ext -out master.pem; "
      "openssl req -newkey rsa:2048 -nodes -subj /CN=tierkv-client -keyout client.key "
      "-out client.csr; "
      "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
      "-out client.pem; chmod 600 *.key";
  proc_test::Exit e = proc_test::RunCommand({"/bin/sh", "-c", script});
  *output = e.output;
  return e.code == 0;
}

// TLS on the control plane: a requester that trusts the CA works; a plaintext one, or one that
// trusts another CA, cannot talk to the master; `tierkv stat` too. The token rides inside TLS.
// The store's data port speaks TLS too: a requester without data_tls_ca_file cannot write there.
// (Mutual TLS: the next test.)
TEST_F(AuthTest, TlsOnTheControlPlaneAndTheDataPlane) {
  std::string output;
  ASSERT_TRUE(MakeCertificates(dir_, &output)) << output;
  const std::string ca = dir_ + "/ca.pem", cert = dir_ + "/master.pem", key = dir_ + "/master.key",
                    client_cert = dir_ + "/client.pem", client_key = dir_ + "/client.key";
  const std::string log = dir_ + "/master.log";
  {
    auto master = Start(
        "master", {"--port", "0", "--tls-cert", cert, "--tls-key", key, "--token-file", token_},
        false, log);
    ASSERT_NE(master, nullptr) << Read(log);
    Config config = RequesterConfig(*master, "tcp");
    config.cluster_token_file = token_;
    Config plaintext = config;
    config.tls_ca_file = ca;
    // The store serves its data port over TLS too (its certificate names 127.0.0.1).
    auto store = Start(
        "store",
        {"--master", master->address(), "--segment-size", "16MiB", "--small-pages", "--token-file",
         token_, "--tls-ca", ca, "--data-tls-cert", cert, "--data-tls-key", key},
        false, dir_ + "/store.log");
    ASSERT_NE(store, nullptr) << Read(dir_ + "/store.log");
    config.data_tls_ca_file = ca;
    {
      auto requester = Requester(config);
      ASSERT_NE(requester, nullptr);
      ASSERT_EQ(PutKey(*requester, "tls", 5), 0);
      EXPECT_EQ(GetKey(*requester, "tls", 5), static_cast<int64_t>(dist_test::kObject));
    }
    {
      // A requester that does not speak TLS to data ports cannot write to this store.
      Config no_data_tls = config;
      no_data_tls.data_tls_ca_file.clear();
      auto requester = Requester(no_data_tls);
      ASSERT_NE(requester, nullptr);
      EXPECT_NE(PutKey(*requester, "plaintext", 6), 0);
    }
    auto refused = Client::Create(plaintext);
    EXPECT_FALSE(refused.ok());
    Config other_ca = config;
    other_ca.tls_ca_file = client_cert;  // a certificate that did not sign the master's
    EXPECT_FALSE(Client::Create(other_ca).ok());
    proc_test::Exit stat =
        RunToExit({"stat", "--master", master->address(), "--token-file", token_, "--tls-ca", ca});
    EXPECT_EQ(stat.code, 0) << stat.output;
  }
}

TEST_F(AuthTest, MutualTlsRefusesAClientWithoutACertificate) {
  std::string output;
  ASSERT_TRUE(MakeCertificates(dir_, &output)) << output;
  const std::string ca = dir_ + "/ca.pem", cert = dir_ + "/master.pem", key = dir_ + "/master.key",
                    client_cert = dir_ + "/client.pem", client_key = dir_ + "/client.key";
  const std::string log = dir_ + "/master.log";
  {
    auto master =
        Start("master", {"--port", "0", "--tls-cert", cert, "--tls-key", key, "--tls-ca", ca},
              false, log);
    ASSERT_NE(master, nullptr) << Read(log);
    Config config = RequesterConfig(*master, "tcp");
    config.tls_ca_file = ca;
    auto no_certificate = Client::Create(config);
    EXPECT_FALSE(no_certificate.ok());
    config.tls_cert_file = client_cert;
    config.tls_key_file = client_key;
    auto requester = Client::Create(config);
    EXPECT_TRUE(requester.ok()) << requester.status().ToString();
    proc_test::Exit stat = RunToExit({"stat", "--master", master->address(), "--tls-ca", ca});
    EXPECT_EQ(stat.code, 1) << stat.output;
    stat = RunToExit({"stat", "--master", master->address(), "--tls-ca", ca, "--tls-cert",
                      client_cert, "--tls-key", client_key});
    EXPECT_EQ(stat.code, 0) << stat.output;
  }
}

}  // namespace
}  // namespace tierkv

namespace tierkv {
namespace {

// With a stores' credential (--store-token-file) only stores give segments to the pool: a
// process holding the requesters' cluster token cannot mount one — not a `tierkv store`, not
// an engine contributing its own segment, not a raw RemoteMaster — while it still puts and
// gets.
TEST_F(AuthTest, OnlyStoresMountSegments) {
  const std::string store_token = Write("store-token", "store-credential-0123456789\n", 0600);
  const std::string log = dir_ + "/master.log";
  auto master =
      Start("master", {"--port", "0", "--token-file", token_, "--store-token-file", store_token},
            false, log);
  ASSERT_NE(master, nullptr) << Read(log);
  proc_test::Exit refused =
      RunToExit({"store", "--master", master->address(), "--segment-size", "16MiB", "--small-pages",
                 "--metrics-port", "-1", "--token-file", token_});
  EXPECT_EQ(refused.code, 1) << refused.output;
  EXPECT_NE(refused.output.find("store's credential"), std::string::npos) << refused.output;
  auto store = Start("store",
                     {"--master", master->address(), "--segment-size", "32MiB", "--small-pages",
                      "--token-file", store_token, "--accept-token-file", token_},
                     false, dir_ + "/store.log");
  ASSERT_NE(store, nullptr) << Read(dir_ + "/store.log");

  Config config = RequesterConfig(*master, "tcp");
  config.cluster_token_file = token_;
  {
    auto requester = Requester(config);
    ASSERT_NE(requester, nullptr);
    ASSERT_EQ(PutKey(*requester, "by-a-requester", 9), 0);
    EXPECT_EQ(GetKey(*requester, "by-a-requester", 9), static_cast<int64_t>(dist_test::kObject));
  }
  // An engine contributing its own segment with the requesters' token: refused.
  Config contributing = config;
  contributing.mode = Mode::kEmbedded;
  contributing.global_segment_size = 16 << 20;
  contributing.use_huge_pages = false;
  auto engine = Client::Create(contributing);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.code(), ErrorCode::UNAUTHENTICATED) << engine.status().ToString();
  // A raw registration (the fake store of issue 25's report): refused too.
  RemoteMasterOptions options;
  options.security.tokens = TokenSet::FromSecrets({kSecret});
  auto fake = RemoteMaster::Connect(master->address(), Millis(5000), options);
  ASSERT_TRUE(fake.ok()) << fake.status().ToString();
  auto mounted = (*fake)->MountSegment("fake:1:0@/x.sock#127.0.0.1:9", uint64_t{100} << 30);
  ASSERT_FALSE(mounted.ok());
  EXPECT_EQ(mounted.code(), ErrorCode::UNAUTHENTICATED);
}

}  // namespace
}  // namespace tierkv

namespace tierkv {
namespace {

// Silent connections to the gRPC port (no HTTP/2 preface) are closed within the handshake
// timeout (10 s), so a flood cannot hold the master's descriptors.
TEST_F(AuthTest, SilentGrpcConnectionsAreClosed) {
  const std::string log = dir_ + "/master.log";
  auto master = Start("master", {"--port", "0", "--idle-timeout-ms", "1000"}, false, log);
  ASSERT_NE(master, nullptr) << Read(log);
  std::vector<int> silent;
  for (int i = 0; i < 200; ++i) {
    const int fd = proc_test::RawConnect(master->port());
    if (fd >= 0) silent.push_back(fd);
  }
  ASSERT_EQ(silent.size(), 200u);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  size_t closed = 0;
  std::vector<bool> done(silent.size());
  while (closed < silent.size() && std::chrono::steady_clock::now() < deadline) {
    for (size_t i = 0; i < silent.size(); ++i) {
      if (done[i]) continue;
      char buf[256];
      const ssize_t n = recv(silent[i], buf, sizeof(buf), MSG_DONTWAIT);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        done[i] = true;
        ++closed;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (int fd : silent) close(fd);
  EXPECT_EQ(closed, silent.size());
  // The master still serves.
  proc_test::Exit stat = RunToExit({"stat", "--master", master->address()});
  EXPECT_EQ(stat.code, 0) << stat.output;
}

}  // namespace
}  // namespace tierkv

namespace tierkv {
namespace {

// etcd with its authentication on: masters (--ha), stores and requesters following
// etcd://..., and `tierkv stat`, reach it with a user and password; without them, or with a
// wrong password, they are refused, naming etcd and the user — never the password.
TEST_F(AuthTest, EtcdIsReachedWithItsOwnCredentials) {
  if (EtcdProcess::FindEtcd().empty()) GTEST_SKIP() << "no etcd (apt-get install etcd-server)";
  EtcdProcessOptions etcd_options;
  etcd_options.parent_dir = dir_;
  auto etcd = EtcdProcess::Start(etcd_options);
  ASSERT_TRUE(etcd.ok()) << etcd.status().ToString();
  const std::string password = "etcd-root-pw-7c41";
  {
    auto admin = EtcdClient::Create({(*etcd)->endpoint()});
    ASSERT_TRUE(admin.ok());
    ASSERT_TRUE((*admin)->EnableAuth(password).ok());
  }
  const std::string password_file = Write("etcd-password", password + "\n", 0600);
  const std::string wrong_file = Write("etcd-wrong", "not-the-password\n", 0600);
  const std::string ha = (*etcd)->address();
  for (const std::vector<std::string>& creds :
       {std::vector<std::string>{},
        std::vector<std::string>{"--etcd-user", "root", "--etcd-password-file", wrong_file}}) {
    std::vector<std::string> args = {"master", "--port", "0", "--metrics-port", "-1", "--ha", ha};
    args.insert(args.end(), creds.begin(), creds.end());
    proc_test::Exit refused = RunToExit(args);
    EXPECT_EQ(refused.code, 1) << refused.output;
    EXPECT_NE(refused.output.find("etcd"), std::string::npos) << refused.output;
    EXPECT_EQ(refused.output.find("not-the-password"), std::string::npos);
  }
  auto master = Start(
      "master",
      {"--port", "0", "--ha", ha, "--etcd-user", "root", "--etcd-password-file", password_file},
      false, dir_ + "/master.log");
  ASSERT_NE(master, nullptr) << Read(dir_ + "/master.log");
  Config config;
  config.mode = Mode::kStandaloneStore;
  config.global_segment_size = 0;
  config.master_server_address = ha;
  config.protocol = "tcp";
  config.require_registered_buffers = false;
  auto no_credentials = Client::Create(config);
  ASSERT_FALSE(no_credentials.ok());
  EXPECT_NE(no_credentials.status().message().find("etcd"), std::string::npos)
      << no_credentials.status().ToString();
  config.etcd_user = "root";
  config.etcd_password_file = password_file;
  const std::string store_config =
      Write("store.json",
            "{\"etcd_user\": \"root\", \"etcd_password_file\": \"" + password_file + "\"}", 0600);
  auto store =
      Start("store",
            {"--master", ha, "--config", store_config, "--segment-size", "32MiB", "--small-pages"},
            false, dir_ + "/store.log");
  ASSERT_NE(store, nullptr) << Read(dir_ + "/store.log");
  {
    auto requester = Requester(config);
    ASSERT_NE(requester, nullptr);
    ASSERT_EQ(PutKey(*requester, "via-etcd", 4), 0);
    EXPECT_EQ(GetKey(*requester, "via-etcd", 4), static_cast<int64_t>(dist_test::kObject));
  }
  proc_test::Exit stat = RunToExit(
      {"stat", "--master", ha, "--etcd-user", "root", "--etcd-password-file", password_file});
  EXPECT_EQ(stat.code, 0) << stat.output;
  proc_test::Exit stat_refused = RunToExit({"stat", "--master", ha});
  EXPECT_EQ(stat_refused.code, 1) << stat_refused.output;
  for (const std::string& text :
       {Read(dir_ + "/master.log"), Read(dir_ + "/store.log"), stat.output}) {
    EXPECT_EQ(text.find(password), std::string::npos) << text;
  }
}

}  // namespace
}  // namespace tierkv

namespace tierkv {
namespace {

// Rotation without a restart: the master accepts a second token file; SIGHUP re-reads both.
// Clients move from the old token to the new one while both are accepted; once the old one is
// dropped, it is refused, and clients holding the new one never noticed.
TEST_F(AuthTest, TheTokenRotatesWithoutARestart) {
  const std::string current = Write("current", std::string(kSecret) + "\n", 0600);
  const std::string next = Write("next", std::string(kSecret) + "\n", 0600);  // none yet
  const std::string log = dir_ + "/master.log";
  auto master = Start(
      "master", {"--port", "0", "--token-file", current, "--accept-token-file", next}, false, log);
  ASSERT_NE(master, nullptr) << Read(log);
  auto store = Start("store",
                     {"--master", master->address(), "--segment-size", "32MiB", "--small-pages",
                      "--token-file", current, "--accept-token-file", next},
                     false, dir_ + "/store.log");
  ASSERT_NE(store, nullptr);
  Config old_config = RequesterConfig(*master, "tcp");
  old_config.cluster_token_file = token_;  // kSecret, the old token
  auto old_client = Requester(old_config);
  ASSERT_NE(old_client, nullptr);
  ASSERT_EQ(PutKey(*old_client, "before", 1), 0);

  // Step 1: the new token is accepted too (SIGHUP to the master and the store).
  const std::string new_secret = "rotated-token-9f8e7d6c5b4a";
  Write("next", new_secret + "\n", 0600);
  ASSERT_EQ(kill(master->pid(), SIGHUP), 0);
  ASSERT_EQ(kill(store->pid(), SIGHUP), 0);
  Config new_config = old_config;
  new_config.cluster_token_file = Write("client-new", new_secret + "\n", 0600);
  std::unique_ptr<Client> new_client;
  ASSERT_TRUE(dist_test::Eventually(
      [&] {
        auto c = Client::Create(new_config);
        if (!c.ok()) return false;
        new_client = std::move(c).value();
        return true;
      },
      std::chrono::seconds(5)));
  EXPECT_EQ(GetKey(*new_client, "before", 1), static_cast<int64_t>(dist_test::kObject));
  EXPECT_EQ(PutKey(*old_client, "during", 2), 0);  // the old one still works

  // Step 3: the new token is the cluster's, the old one is dropped.
  Write("current", new_secret + "\n", 0600);
  ASSERT_EQ(kill(master->pid(), SIGHUP), 0);
  ASSERT_EQ(kill(store->pid(), SIGHUP), 0);
  ASSERT_TRUE(dist_test::Eventually(
      [&] { return Client::Create(old_config).code() == ErrorCode::UNAUTHENTICATED; },
      std::chrono::seconds(5)));
  EXPECT_EQ(PutKey(*new_client, "after", 3), 0);
  EXPECT_EQ(GetKey(*new_client, "during", 2), static_cast<int64_t>(dist_test::kObject));
  EXPECT_NE(Read(log).find("SIGHUP: token files re-read"), std::string::npos) << Read(log);
}

}  // namespace
}  // namespace tierkv
