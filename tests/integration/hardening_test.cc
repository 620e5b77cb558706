// Hardening of the `tierkv master` and `tierkv store` processes (issue 12), each against the
// real binary on 127.0.0.1: bad command lines, ports in use, leftovers of killed stores.
//
// TIERKV_TEST_BINARY, when set, names another tierkv executable to test (e.g. an older build,
// to check that these tests fail on it); by default the one of this build.
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "distributed_test_util.h"
#include "process_test_util.h"
#include "rpc/remote_master.h"

namespace tierkv {
namespace {

using namespace std::chrono_literals;
using dist_test::GetKey;
using dist_test::PutKey;
using dist_test::Requester;
using dist_test::RequesterConfig;
using dist_test::StartMaster;
using proc_test::DataPort;
using proc_test::Exit;
using proc_test::Frame;
using proc_test::RawConnect;
using proc_test::RunToExit;
using proc_test::SendAndClose;
using proc_test::StillRunning;

// A TCP port on 127.0.0.1 held (bound and listening) until the object dies.
class HeldPort {
 public:
  HeldPort() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(fd_, 4), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~HeldPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// A fresh private directory under the build tree (removed with everything in it).
class TempDir {
 public:
  TempDir() {
    char name[] = "hardening-XXXXXX";
    path_ = std::filesystem::absolute(mkdtemp(name)).string();
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Regression (issue 12): CLI11's ExistingFile check answered a missing --config with its own
// exit status 105 instead of INVALID_CONFIG and exit status 2.
TEST(HardeningTest, MissingConfigFileIsInvalidConfigWithExitStatus2) {
  const std::string missing = "/nonexistent/tierkv-store.json";
  Exit store = RunToExit({"store", "--master", "127.0.0.1:1", "--config", missing});
  EXPECT_EQ(store.code, 2) << store.output;
  EXPECT_NE(store.output.find("INVALID_CONFIG"), std::string::npos) << store.output;
  EXPECT_NE(store.output.find(missing), std::string::npos) << store.output;

  Exit bench = RunToExit({"bench", "embedded", "--config", missing});
  EXPECT_EQ(bench.code, 2) << bench.output;
  EXPECT_NE(bench.output.find("INVALID_CONFIG"), std::string::npos) << bench.output;
}

// Regression (issue 12): the store registered with the master and mounted its segment before it
// found its metrics port taken. Now the ports come first: with the metrics port held and no
// master listening at all, the store fails at once on the port (exit 1, the message names it),
// never reaching the master (the old code failed on the unreachable master after seconds).
TEST(HardeningTest, MetricsPortInUseFailsBeforeTheMasterIsAsked) {
  HeldPort metrics;
  HeldPort no_master;  // listens, never answers gRPC: a store that asks it fails after 5 s
  const auto start = std::chrono::steady_clock::now();
  Exit store = RunToExit({"store", "--master", "127.0.0.1:" + std::to_string(no_master.port()),
                          "--segment-size", "8MiB", "--small-pages", "--metrics-port",
                          std::to_string(metrics.port())});
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(store.code, 1) << store.output;
  EXPECT_NE(store.output.find("port " + std::to_string(metrics.port())), std::string::npos)
      << store.output;
  EXPECT_NE(store.output.find("Address already in use"), std::string::npos) << store.output;
  EXPECT_EQ(store.output.find("RPC_FAIL (-900): cannot reach"), std::string::npos) << store.output;
  EXPECT_LT(took, 4s) << "the store asked the master before checking its metrics port";
}

// A socket file at `path` that nobody listens on (bound, then closed).
void MakeDeadSocket(const std::string& path) {
  const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  ASSERT_LT(path.size(), sizeof(address.sun_path));
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0) << path;
  close(fd);
}

// The pid of a process that has exited and been reaped.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

// Regression (issue 12): stores killed with SIGKILL left their seg-*.sock files behind (about
// 130 had piled up). A store now removes, at start-up, the sockets of processes that are gone —
// and nothing else: not a live process's socket, not a file that is not a socket, not another
// name.
TEST(HardeningTest, StoreRemovesSocketsOfDeadStoresAtStartup) {
  TempDir base;
  const std::string dir = base.path() + "/tierkv-" + std::to_string(geteuid());
  ASSERT_EQ(mkdir(dir.c_str(), 0700), 0);
  const pid_t dead = DeadPid();
  const pid_t alive = fork();  // a live process whose socket must stay
  if (alive == 0) {
    pause();
    _exit(0);
  }
  const std::string stale = dir + "/seg-" + std::to_string(dead) + "-0.sock";
  const std::string stale2 = dir + "/seg-" + std::to_string(dead) + "-7.sock";
  const std::string live = dir + "/seg-" + std::to_string(alive) + "-0.sock";
  const std::string not_socket = dir + "/seg-" + std::to_string(dead) + "-1.sock";
  const std::string other_name = dir + "/mine-" + std::to_string(dead) + "-0.sock";
  MakeDeadSocket(stale);
  MakeDeadSocket(stale2);
  MakeDeadSocket(live);
  MakeDeadSocket(other_name);
  std::ofstream(not_socket) << "data";

  auto master = StartMaster();
  ASSERT_NE(master, nullptr);
  MasterProcessOptions options;
  options.binary = dist_test::TestBinary();
  options.command = "store";
  options.args = {"--master", master->address(), "--segment-size",
                  "8MiB",     "--small-pages",   "--metrics-port",
                  "-1"};
  options.env = {{"TIERKV_IPC_DIR", base.path()}};
  auto store = MasterProcess::Start(options);
  ASSERT_TRUE(store.ok()) << store.status().ToString();

  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_FALSE(std::filesystem::exists(stale2));
  EXPECT_TRUE(std::filesystem::exists(live));
  EXPECT_TRUE(std::filesystem::exists(not_socket));
  EXPECT_TRUE(std::filesystem::exists(other_name));
  // The store's own socket is there, and serves.
  const std::string own = dir + "/seg-" + std::to_string((*store)->pid()) + "-0.sock";
  EXPECT_TRUE(std::filesystem::exists(own)) << (*store)->segment_name();
  (*store)->Stop();
  kill(alive, SIGKILL);
  waitpid(alive, nullptr, 0);
}

// ---- The data port and the listeners (issue 12, items 1 and 2) ----

// A store of the binary under test, with metrics on a free port unless `metrics` is false.
std::unique_ptr<MasterProcess> StartStoreOf(const MasterProcess& master, bool metrics,
                                            std::vector<std::string> extra = {}) {
  MasterProcessOptions options;
  options.binary = dist_test::TestBinary();
  options.command = "store";
  options.args = {"--master",      master.address(), "--segment-size",    "32MiB",
                  "--small-pages", "--metrics-port", metrics ? "0" : "-1"};
  options.args.insert(options.args.end(), extra.begin(), extra.end());
  options.expect_metrics = metrics;
  auto started = MasterProcess::Start(options);
  EXPECT_TRUE(started.ok()) << started.status().ToString();
  return started.ok() ? std::move(started).value() : nullptr;
}

// The port of the store's data address (after '#' in its segment name), or 0.
// Regression (issue 12): sixteen 0xff bytes on the store's data port aborted it (UCX 1.13's
// socket connection manager asserted on them). Now a real store is flooded on its data port —
// the 16 bytes, 100 KB of zeroes, random bytes of many lengths, UCX's tcp magic followed by an
// oversized length, frames of the tcp transport with random fields, truncated and oversized
// frames, 300 connections open at once — and must still be running and serve a byte-exact get.
// `token_file` non-empty: the cluster runs with that token (every process holds it), and the
// storm adds hellos with wrong proofs.
void GarbageStorm(const std::string& token_file) {
  std::vector<std::string> auth;
  if (!token_file.empty()) auth = {"--token-file", token_file};
  Config requester_config;
  auto master = StartMaster(auth);
  ASSERT_NE(master, nullptr);
  auto store = StartStoreOf(*master, false, auth);
  ASSERT_NE(store, nullptr);
  const int port = DataPort(*store);
  ASSERT_GT(port, 0) << store->segment_name();
  requester_config = RequesterConfig(*master, "tcp");
  requester_config.cluster_token_file = token_file;
  {
    auto requester = Requester(requester_config);
    ASSERT_NE(requester, nullptr);
    EXPECT_EQ(PutKey(*requester, "before-the-storm", 7), 0);
  }

  std::mt19937 rng(20261201);
  auto random_bytes = [&rng](size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };
  SendAndClose(port, std::string(16, '\xff'), true);
  SendAndClose(port, std::string(100 * 1000, '\0'), true);
  for (size_t n : {1, 7, 8, 15, 16, 17, 39, 40, 41, 64, 1000, 65536}) {
    SendAndClose(port, random_bytes(n), true);
  }
  // UCX's tcp magic number and an AM header claiming 4 GiB (what aborted UCX's tcp transport).
  std::string ucx(8, '\0');
  const uint64_t magic = 0xCAFEBABE12345678ull;
  std::memcpy(ucx.data(), &magic, 8);
  ucx += std::string("\x01\xff\xff\xff\xff", 5) + random_bytes(64);
  SendAndClose(port, ucx, true);
  // Frames of the tcp transport: random fields; truncated; oversized; out of order.
  for (int i = 0; i < 200; ++i) {
    std::string frame =
        Frame(static_cast<uint16_t>(rng() % 6), rng(), rng(), rng(), static_cast<uint32_t>(rng()));
    frame += random_bytes(rng() % 100);
    if (i % 3 == 0) frame.resize(rng() % frame.size());  // truncated
    SendAndClose(port, frame);
  }
  SendAndClose(port, Frame(2, 1, 0, uint64_t{1} << 40, 0), true);         // read before hello
  SendAndClose(port, Frame(1, 1, 0, 0, 1u << 31) + "x", true);            // hello, huge name
  SendAndClose(port, Frame(3, 1, 0, 1u << 30, 1u << 30) + "data", true);  // write, huge
  if (!token_file.empty()) {
    // Hellos with a zero and a random proof: refused, closed.
    const std::string name = store->segment_name().substr(0, store->segment_name().find('@'));
    for (int i = 0; i < 20; ++i) {
      const std::string proof = i % 2 == 0 ? std::string(32, '\0') : random_bytes(32);
      SendAndClose(port, Frame(1, 1, 0, 0, static_cast<uint32_t>(32 + name.size())) + proof + name,
                   true);
    }
  }
  // 300 connections at once, each with a few random bytes, then all closed together.
  std::vector<int> many;
  for (int i = 0; i < 300; ++i) {
    const int fd = RawConnect(port);
    if (fd < 0) continue;
    const std::string junk = random_bytes(1 + rng() % 50);
    (void)send(fd, junk.data(), junk.size(), MSG_NOSIGNAL);
    many.push_back(fd);
  }
  EXPECT_GT(many.size(), 250u);
  for (int fd : many) close(fd);

  ASSERT_TRUE(StillRunning(store->pid())) << "the store died on garbage at its data port";
  // It serves: a fresh requester gets the bytes put before the storm, and a new put works.
  auto requester = Requester(requester_config);
  ASSERT_NE(requester, nullptr);
  EXPECT_EQ(GetKey(*requester, "before-the-storm", 7), static_cast<int64_t>(dist_test::kObject));
  EXPECT_EQ(PutKey(*requester, "after-the-storm", 8), 0);
  EXPECT_EQ(GetKey(*requester, "after-the-storm", 8), static_cast<int64_t>(dist_test::kObject));
  EXPECT_TRUE(StillRunning(store->pid()));
}

TEST(HardeningTest, GarbageOnTheDataPortLeavesTheStoreServing) { GarbageStorm(""); }

TEST(HardeningTest, GarbageOnTheDataPortLeavesAStoreWithATokenServing) {
  char dir[] = "/tmp/tierkv-storm-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string token = std::string(dir) + "/token";
  std::ofstream(token) << "storm-token-0123456789abcdef\n";
  chmod(token.c_str(), 0600);
  GarbageStorm(token);
  std::filesystem::remove_all(dir);
}

// A flood of silent connections up to the store's descriptor limit must not lock requesters
// out: the store (started with RLIMIT_NOFILE 200) drops the oldest connections without a hello
// to make room, so a requester's get is served while 300 silent connections are open.
TEST(HardeningTest, ASilentConnectionFloodAtTheDescriptorLimitLocksNoRequesterOut) {
  auto master = StartMaster();
  ASSERT_NE(master, nullptr);
  rlimit old_limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &old_limit), 0);
  rlimit low = old_limit;
  low.rlim_cur = 200;  // inherited by the store's process
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  auto store = StartStoreOf(*master, false);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &old_limit), 0);
  ASSERT_NE(store, nullptr);
  auto requester = Requester(RequesterConfig(*master, "tcp"));
  ASSERT_NE(requester, nullptr);
  ASSERT_EQ(PutKey(*requester, "k", 3), 0);
  const int port = DataPort(*store);
  std::vector<int> flood;
  for (int i = 0; i < 300; ++i) {
    const int fd = RawConnect(port);
    if (fd >= 0) flood.push_back(fd);
  }
  EXPECT_EQ(flood.size(), 300u);
  std::this_thread::sleep_for(300ms);
  auto fresh = Requester(RequesterConfig(*master, "tcp"));  // a new connection to the store
  ASSERT_NE(fresh, nullptr);
  EXPECT_EQ(GetKey(*fresh, "k", 3), static_cast<int64_t>(dist_test::kObject));
  EXPECT_TRUE(StillRunning(store->pid()));
  for (int fd : flood) close(fd);
}

// The TCP sockets `pid` listens on, as "a.b.c.d:port" (IPv6: "[hex]:port").
std::set<std::string> ListeningSockets(pid_t pid) {
  std::set<std::string> inodes;
  const std::string fd_dir = "/proc/" + std::to_string(pid) + "/fd";
  if (DIR* dir = opendir(fd_dir.c_str())) {
    while (const dirent* entry = readdir(dir)) {
      char target[128] = {};
      const std::string link = fd_dir + "/" + entry->d_name;
      const ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
      if (n > 0 && std::strncmp(target, "socket:[", 8) == 0) {
        inodes.insert(std::string(target + 8, static_cast<size_t>(n) - 9));
      }
    }
    closedir(dir);
  }
  std::set<std::string> out;
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/net/" + table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      fields >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >>
          timeout >> inode;
      if (state != "0A" || inodes.count(inode) == 0) continue;  // 0A: LISTEN
      const size_t colon = local.find(':');
      const int port = std::stoi(local.substr(colon + 1), nullptr, 16);
      const std::string hex = local.substr(0, colon);
      std::string address;
      // IPv4 as one host-order word; an IPv4-mapped IPv6 address (a dual-stack socket bound to
      // ::ffff:a.b.c.d, as gRPC binds 127.0.0.1) as four, the last the IPv4 address.
      const bool mapped = hex.size() == 32 && hex.compare(0, 16, std::string(16, '0')) == 0 &&
                          hex.compare(16, 8, "FFFF0000") == 0;
      if (hex.size() == 8 || mapped) {
        in_addr a{};
        a.s_addr = static_cast<uint32_t>(std::stoul(hex.substr(hex.size() - 8), nullptr, 16));
        address = inet_ntoa(a);
      } else {
        address = "[" + hex + "]";
      }
      out.insert(address + ":" + std::to_string(port));
    }
  }
  return out;
}

std::string Join(const std::set<std::string>& items) {
  std::string out;
  for (const std::string& item : items) out += (out.empty() ? "" : " ") + item;
  return out;
}

// Regression (issue 12): besides --data-host, a store listened on eth0's address (UCX's tcp
// transport on every network device), and so did every tcp requester. Now each process listens
// exactly where its flags say, and a tcp requester listens nowhere.
TEST(HardeningTest, EveryListenerIsWhereItIsConfiguredAndNowhereElse) {
  auto master = StartMaster({}, 0, /*metrics=*/true);
  ASSERT_NE(master, nullptr);
  auto store = StartStoreOf(*master, true);
  ASSERT_NE(store, nullptr);
  const std::set<std::string> before = ListeningSockets(getpid());
  auto requester = Requester(RequesterConfig(*master, "tcp"));
  ASSERT_NE(requester, nullptr);
  ASSERT_EQ(PutKey(*requester, "k", 1), 0);  // connects to the store over the network
  ASSERT_EQ(GetKey(*requester, "k", 1), static_cast<int64_t>(dist_test::kObject));

  auto stats = RemoteMaster::QueryStats(master->address(), Millis(5000));
  ASSERT_TRUE(stats.ok()) << stats.status().ToString();
  ASSERT_NE(stats->meta_port, 0u);  // the metadata channel is on by default
  EXPECT_EQ(ListeningSockets(master->pid()),
            (std::set<std::string>{"127.0.0.1:" + std::to_string(master->port()),
                                   "127.0.0.1:" + std::to_string(stats->meta_port),
                                   "127.0.0.1:" + std::to_string(master->metrics_port())}))
      << Join(ListeningSockets(master->pid()));
  EXPECT_EQ(ListeningSockets(store->pid()),
            (std::set<std::string>{"127.0.0.1:" + std::to_string(DataPort(*store)),
                                   "127.0.0.1:" + std::to_string(store->metrics_port())}))
      << Join(ListeningSockets(store->pid()));
  EXPECT_EQ(ListeningSockets(getpid()), before)
      << "a tcp requester opened listeners: " << Join(ListeningSockets(getpid()));
}

}  // namespace
}  // namespace tierkv
