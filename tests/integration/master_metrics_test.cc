// `tierkv master`'s metrics (/metrics, /health on --metrics-port) and `tierkv stat`, against the
// real binary (TIERKV_BINARY) on 127.0.0.1 with free ports. Every process a test starts is
// owned by a MasterProcess or waited for by RunTierkv (killed at its timeout), so nothing
// outlives a test.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/exec_args.h"
#include "http_test_util.h"
#include "net_test_util.h"
#include "rpc/master_process.h"
#include "rpc/remote_master.h"
#include "size_units.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

#ifndef TIERKV_BINARY
#error "TIERKV_BINARY (the tierkv executable) must be defined by the build"
#endif

namespace tierkv {
namespace {

using test_util::FreePort;

using SteadyClock = std::chrono::steady_clock;
using http_test::HttpGet;
using http_test::Sample;

std::unique_ptr<MasterProcess> StartMasterWithMetrics(std::vector<std::string> extra = {
                                                          "--metrics-port", "0"}) {
  MasterProcessOptions options;
  options.binary = TIERKV_BINARY;
  options.args = {"--host", "127.0.0.1", "--port", "0"};
  options.args.insert(options.args.end(), extra.begin(), extra.end());
  options.expect_metrics = true;
  for (size_t i = 0; i + 1 < extra.size(); ++i) {
    if (extra[i] == "--metrics-port" && extra[i + 1] == "-1") options.expect_metrics = false;
  }
  options.env = {{"TIERKV_LOG_LEVEL", "warn"}};
  Result<std::unique_ptr<MasterProcess>> started = MasterProcess::Start(options);
  EXPECT_TRUE(started.ok()) << started.status().ToString();
  if (!started.ok()) return nullptr;
  return std::move(started).value();
}

std::unique_ptr<RemoteMaster> ConnectForMetrics(const MasterProcess& master) {
  RemoteMasterOptions options;
  options.heartbeat_interval = Millis(100);
  options.rpc_timeout = Millis(3000);
  options.host = "metrics-test";
  Result<std::unique_ptr<RemoteMaster>> connected =
      RemoteMaster::Connect(master.address(), Millis(5000), options);
  EXPECT_TRUE(connected.ok()) << connected.status().ToString();
  if (!connected.ok()) return nullptr;
  return std::move(connected).value();
}

void PutForMetrics(RemoteMaster& master, const std::vector<std::string>& keys, uint64_t size) {
  std::vector<Result<PutStartResult>> started =
      master.PutStart(keys, std::vector<uint64_t>(keys.size(), size), {});
  std::vector<uint64_t> ids;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(started[i].ok()) << keys[i] << ": " << started[i].status().ToString();
    ids.push_back(started[i]->put_id);
  }
  for (const Status& st : master.PutEnd(keys, ids, std::vector<uint64_t>(keys.size(), 7))) {
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
}

struct RunResult {
  int exit_code = -1;  // -1: killed at the timeout, or did not exit normally
  std::string out;
  std::string err;
  Millis took{0};
  bool killed = false;  // at the timeout
};

// Runs `tierkv <args...>`, capturing stdout and stderr; SIGKILL after `timeout`. Always reaps.
RunResult RunTierkv(const std::vector<std::string>& args, Millis timeout = Millis(20000)) {
  RunResult run;
  std::vector<std::string> command = {TIERKV_BINARY};
  command.insert(command.end(), args.begin(), args.end());
  // Built before fork: this process has gRPC threads, and a child that allocated (setenv) could
  // hang on a lock one of them held (it did, under ASan: a stat killed with nothing printed).
  const ExecArgs exec(std::move(command), {{"TIERKV_LOG_LEVEL", "warn"}});
  int out_pipe[2];
  int err_pipe[2];
  if (pipe2(out_pipe, O_CLOEXEC) != 0 || pipe2(err_pipe, O_CLOEXEC) != 0) return run;
  const auto start = SteadyClock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    dup2(out_pipe[1], STDOUT_FILENO);
    dup2(err_pipe[1], STDERR_FILENO);
    exec.Exec();
    _exit(127);
  }
  close(out_pipe[1]);
  close(err_pipe[1]);
  const auto deadline = start + timeout;
  bool out_open = true;
  bool err_open = true;
  bool killed = false;
  while (out_open || err_open) {
    const auto left = std::chrono::duration_cast<Millis>(deadline - SteadyClock::now()).count();
    if (left <= 0) {
      kill(pid, SIGKILL);
      killed = true;
      break;
    }
    pollfd fds[2] = {{out_open ? out_pipe[0] : -1, POLLIN, 0},
                     {err_open ? err_pipe[0] : -1, POLLIN, 0}};
    if (poll(fds, 2, static_cast<int>(left)) <= 0) continue;
    char chunk[4096];
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      const ssize_t n = read(fds[i].fd, chunk, sizeof(chunk));
      if (n <= 0) {
        (i == 0 ? out_open : err_open) = false;
      } else {
        (i == 0 ? run.out : run.err).append(chunk, static_cast<size_t>(n));
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.took = std::chrono::duration_cast<Millis>(SteadyClock::now() - start);
  close(out_pipe[0]);
  close(err_pipe[0]);
  if (!killed && WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  run.killed = killed;
  return run;
}

// For failure messages: how the run ended, and all it printed (a run killed at the timeout may
// have printed its answer and hung on the way out, or never got that far).
std::string Describe(const RunResult& run) {
  return (run.killed ? "killed after " : "exited after ") + std::to_string(run.took.count()) +
         " ms\nstdout: " + run.out + "\nstderr: " + run.err;
}

// A TCP listener on 127.0.0.1 that accepts nothing and never answers.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 16), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentListener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

std::string Metrics(const MasterProcess& master) {
  http_test::HttpResponse response = HttpGet(master.metrics_port(), "/metrics");
  EXPECT_EQ(response.status, 200) << response.headers;
  return response.body;
}

TEST(MasterMetricsTest, MetricsAndHealthFollowTheMaster) {
  auto master = StartMasterWithMetrics();
  ASSERT_NE(master, nullptr);
  ASSERT_GT(master->metrics_port(), 0);
  EXPECT_NE(master->metrics_port(), master->port());

  http_test::HttpResponse health = HttpGet(master->metrics_port(), "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(health.body, "ok\n");

  std::string text = Metrics(*master);
  EXPECT_EQ(Sample(text, "tierkv_master_objects"), 0.0) << text;
  EXPECT_EQ(Sample(text, "tierkv_master_puts_total"), 0.0);
  EXPECT_EQ(Sample(text, "tierkv_master_clients"), 0.0);
  EXPECT_EQ(Sample(text, "tierkv_master_rpc_duration_seconds_count{method=\"PutStart\"}"), 0.0);

  auto client = ConnectForMetrics(*master);
  ASSERT_NE(client, nullptr);
  Result<SegmentId> mounted = client->MountSegment("metrics-seg", 16 * kMiB);
  ASSERT_TRUE(mounted.ok()) << mounted.status().ToString();
  PutForMetrics(*client, {"m1", "m2", "m3"}, 4096);
  std::vector<Result<ObjectReplicas>> got = client->GetReplicas({"m1", "m2", "absent"});
  ASSERT_TRUE(got[0].ok() && got[1].ok());
  EXPECT_EQ(got[2].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_TRUE(client->Remove("m3", true).ok());

  text = Metrics(*master);
  EXPECT_EQ(Sample(text, "tierkv_master_objects"), 2.0) << text;
  EXPECT_EQ(Sample(text, "tierkv_master_memory_replicas"), 2.0);
  EXPECT_EQ(Sample(text, "tierkv_master_puts_total"), 3.0);
  EXPECT_EQ(Sample(text, "tierkv_master_gets_total"), 3.0);
  EXPECT_EQ(Sample(text, "tierkv_master_get_hits_total"), 2.0);
  EXPECT_EQ(Sample(text, "tierkv_master_get_misses_total"), 1.0);
  EXPECT_EQ(Sample(text, "tierkv_master_removes_total"), 1.0);
  EXPECT_EQ(Sample(text, "tierkv_master_lease_grants_total"), 2.0);
  EXPECT_EQ(Sample(text, "tierkv_master_clients"), 1.0);
  EXPECT_EQ(Sample(text, "tierkv_master_segments"), 1.0);
  // A master hands out segment ids from a random base (see MasterServer::Start).
  const std::string segment =
      "{segment_id=\"" + std::to_string(*mounted) + "\",segment=\"metrics-seg\"}";
  EXPECT_EQ(Sample(text, "tierkv_master_segment_capacity_bytes" + segment), 16.0 * kMiB) << text;
  EXPECT_GE(Sample(text, "tierkv_master_segment_used_bytes" + segment).value_or(0), 2 * 4096.0);
  // One histogram per RPC method, timed in the handler.
  EXPECT_EQ(Sample(text, "tierkv_master_rpc_duration_seconds_count{method=\"PutStart\"}"), 1.0);
  EXPECT_EQ(Sample(text, "tierkv_master_rpc_duration_seconds_count{method=\"GetReplicas\"}"), 1.0);
  EXPECT_EQ(Sample(text, "tierkv_master_rpc_duration_seconds_count{method=\"RegisterClient\"}"),
            1.0);
  EXPECT_GT(Sample(text, "tierkv_master_rpc_duration_seconds_sum{method=\"PutStart\"}").value_or(0),
            0.0);
  EXPECT_EQ(
      Sample(text, "tierkv_master_rpc_duration_seconds_bucket{method=\"PutEnd\",le=\"+Inf\"}"),
      1.0);
  EXPECT_NE(text.find("# TYPE tierkv_master_rpc_duration_seconds histogram"), std::string::npos);

  // The client leaves: its segment and objects go, and the metrics say so.
  client.reset();
  text = Metrics(*master);
  EXPECT_EQ(Sample(text, "tierkv_master_objects"), 0.0) << text;
  EXPECT_EQ(Sample(text, "tierkv_master_clients"), 0.0);
  EXPECT_FALSE(Sample(text, "tierkv_master_segment_used_bytes" + segment).has_value());

  std::optional<int> exit_status = master->Stop();
  ASSERT_TRUE(exit_status.has_value()) << "did not stop on SIGTERM";
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0);
  EXPECT_EQ(HttpGet(master->metrics_port(), "/health").status, 0);
}

TEST(MasterMetricsTest, StatShowsTheNumbers) {
  auto master = StartMasterWithMetrics();
  ASSERT_NE(master, nullptr);
  auto client = ConnectForMetrics(*master);
  ASSERT_NE(client, nullptr);

  // Before any get: the hit rate is n/a (text) and null (JSON).
  RunResult run = RunTierkv({"stat", "--master", master->address()});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  EXPECT_NE(run.out.find("hit rate n/a"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("clients: 1 "), std::string::npos) << run.out;  // stat is no client

  Result<SegmentId> mounted = client->MountSegment("stat-seg", 16 * kMiB);
  ASSERT_TRUE(mounted.ok()) << mounted.status().ToString();
  PutForMetrics(*client, {"s1", "s2", "s3", "s4"}, 1 * kMiB);
  std::vector<Result<ObjectReplicas>> got = client->GetReplicas({"s1", "s2", "nope"});
  ASSERT_TRUE(got[0].ok() && got[1].ok());

  run = RunTierkv({"stat", "--master", master->address()});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  std::cerr << run.out;
  EXPECT_NE(run.out.find("tierkv master " + master->address()), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("segments: 1"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("[" + std::to_string(*mounted) + "] stat-seg: 4.0 MiB / 16.0 MiB (25.0%)"),
            std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("objects: 4 (0 pending, 0 groups)"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("replicas: 4 in memory, 0 on disk"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("gets: 3 keys, 2 hits, 1 misses, hit rate 66.7%"), std::string::npos)
      << run.out;
  EXPECT_NE(run.out.find("puts: 4, removes: 0"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("evictions: 0 objects"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("demotions: 0 objects"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("clients: 1 (0 expired since start)"), std::string::npos) << run.out;
  // Metadata only here: no client moved bytes.
  EXPECT_NE(run.out.find("transfers (as clients report them): none"), std::string::npos) << run.out;

  run = RunTierkv({"stat", "--master", master->address(), "--json"});
  ASSERT_EQ(run.exit_code, 0) << Describe(run);
  nlohmann::json json = nlohmann::json::parse(run.out, nullptr, false);
  ASSERT_FALSE(json.is_discarded()) << run.out;
  ASSERT_TRUE(json.is_object());
  EXPECT_EQ(json["master"], master->address());
  EXPECT_EQ(json["objects"], 4);
  EXPECT_EQ(json["memory_replicas"], 4);
  EXPECT_EQ(json["disk_replicas"], 0);
  EXPECT_EQ(json["gets"], 3);
  EXPECT_EQ(json["get_hits"], 2);
  EXPECT_EQ(json["get_misses"], 1);
  EXPECT_NEAR(json["hit_rate"].get<double>(), 2.0 / 3.0, 1e-9);
  EXPECT_EQ(json["puts"], 4);
  EXPECT_EQ(json["evicted_objects"], 0);
  EXPECT_EQ(json["demoted_objects"], 0);
  EXPECT_EQ(json["clients"], 1);
  EXPECT_EQ(json["transfers"]["tcp"]["read_bytes"], 0);
  EXPECT_EQ(json["transfers"]["shm"]["written_bytes"], 0);
  ASSERT_EQ(json["segments"].size(), 1u);
  EXPECT_EQ(json["segments"][0]["name"], "stat-seg");
  EXPECT_EQ(json["segments"][0]["capacity"], 16 * kMiB);
  EXPECT_EQ(json["segments"][0]["used"], 4 * kMiB);
  EXPECT_NEAR(json["segments"][0]["used_ratio"].get<double>(), 0.25, 1e-9);
  // Exactly one line: one JSON object.
  EXPECT_EQ(run.out.find('\n'), run.out.size() - 1) << run.out;
}

TEST(MasterMetricsTest, StatWithAWrongAddressFailsWithinItsTimeout) {
  SilentListener silent;  // accepts TCP, never speaks HTTP/2: only the deadline ends the call
  const std::vector<std::string> addresses = {"127.0.0.1:" + std::to_string(FreePort()),
                                              "no-such-host.invalid:50051",
                                              "127.0.0.1:" + std::to_string(silent.port())};
  for (const std::string& address : addresses) {
    RunResult run = RunTierkv({"stat", "--master", address, "--timeout-ms", "500"});
    EXPECT_EQ(run.exit_code, 1) << address << ": " << run.err;
    EXPECT_NE(run.err.find("tierkv stat: error: RPC_FAIL"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find(address), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("500 ms"), std::string::npos) << run.err;
    EXPECT_TRUE(run.out.empty()) << run.out;
    // The process starts, asks, and gives up: well within the timeout plus startup.
    EXPECT_LT(run.took, Millis(500 + 2000)) << address << ": " << run.err;
    std::cerr << "  " << run.err;
  }
  RunResult missing = RunTierkv({"stat"});
  EXPECT_EQ(missing.exit_code, 2) << missing.err;  // a usage error: --master is required
  EXPECT_NE(missing.err.find("--master"), std::string::npos) << missing.err;
}

TEST(MasterMetricsTest, MetricsPortInUseIsAClearErrorAndExitStatus1) {
  SilentListener busy;
  const std::string port = std::to_string(busy.port());
  RunResult run = RunTierkv(
      {"master", "--host", "127.0.0.1", "--port", "0", "--metrics-port", port}, Millis(15000));
  EXPECT_EQ(run.exit_code, 1) << run.err;
  EXPECT_NE(run.err.find("cannot serve metrics on 127.0.0.1:" + port), std::string::npos)
      << run.err;
  EXPECT_NE(run.err.find("Address already in use"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("--metrics-port"), std::string::npos) << run.err;
  EXPECT_EQ(run.out.find("listening on"), std::string::npos) << run.out;  // never announced

  // The gRPC port as the metrics port: refused before binding anything (exit status 2).
  const std::string grpc_port = std::to_string(FreePort());
  run =
      RunTierkv({"master", "--host", "127.0.0.1", "--port", grpc_port, "--metrics-port", grpc_port},
                Millis(15000));
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("--metrics-port " + grpc_port), std::string::npos) << run.err;
}

TEST(MasterMetricsTest, MetricsPortMinusOneServesNone) {
  auto master = StartMasterWithMetrics({"--metrics-port", "-1"});
  ASSERT_NE(master, nullptr);
  EXPECT_EQ(master->metrics_port(), 0);
  auto client = ConnectForMetrics(*master);  // the master works as before
  ASSERT_NE(client, nullptr);
  Result<MasterProcessStats> stats = client->ProcessStats();
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  EXPECT_EQ(stats->clients, 1u);
  RunResult run = RunTierkv({"stat", "--master", master->address()});
  EXPECT_EQ(run.exit_code, 0) << Describe(run);
}

}  // namespace
}  // namespace tierkv
