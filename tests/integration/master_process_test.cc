// Multi-process tests of `tierkv master`: the real binary (TIERKV_BINARY, set by CMake) on
// 127.0.0.1 with a free port (--port 0, read back from its "listening on" line), driven through
// RemoteMaster. Every process a test starts is owned by a MasterProcess, whose destructor
// kills and reaps it, so a failing test still leaves nothing behind.
#include "rpc/master_process.h"

#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "net_test_util.h"
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

std::unique_ptr<MasterProcess> StartMasterAt(int port = 0, std::vector<std::string> extra = {}) {
  MasterProcessOptions options;
  options.binary = TIERKV_BINARY;
  // No metrics server (tests run in parallel; master_metrics_test.cc covers it).
  options.args = {"--host", "127.0.0.1", "--port", std::to_string(port), "--metrics-port", "-1"};
  options.args.insert(options.args.end(), extra.begin(), extra.end());
  Result<std::unique_ptr<MasterProcess>> started = MasterProcess::Start(options);
  EXPECT_TRUE(started.ok()) << started.status().ToString();
  if (!started.ok()) return nullptr;
  return std::move(started).value();
}

std::unique_ptr<RemoteMaster> ConnectToMaster(const MasterProcess& master,
                                              Millis heartbeat = Millis(100),
                                              const std::string& host = "test-host") {
  RemoteMasterOptions options;
  options.heartbeat_interval = heartbeat;
  options.rpc_timeout = Millis(3000);
  options.host = host;
  Result<std::unique_ptr<RemoteMaster>> connected =
      RemoteMaster::Connect(master.address(), Millis(5000), options);
  EXPECT_TRUE(connected.ok()) << connected.status().ToString();
  if (!connected.ok()) return nullptr;
  return std::move(connected).value();
}

// Polls `done` every 20 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& done, Millis timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(Millis(20));
  }
  return done();
}

// Puts complete objects of `size` bytes (metadata only); returns their put results' codes.
void PutObjects(RemoteMaster& master, const std::vector<std::string>& keys, uint64_t size,
                const std::string& preferred = "") {
  ReplicateConfig config;
  config.preferred_segment = preferred;
  std::vector<Result<PutStartResult>> started =
      master.PutStart(keys, std::vector<uint64_t>(keys.size(), size), config);
  ASSERT_EQ(started.size(), keys.size());
  std::vector<uint64_t> ids;
  std::vector<uint64_t> sums;
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(started[i].ok()) << keys[i] << ": " << started[i].status().ToString();
    ASSERT_EQ(started[i]->replicas.size(), 1u);
    ids.push_back(started[i]->put_id);
    sums.push_back(0x1000 + i);
  }
  std::vector<Status> ended = master.PutEnd(keys, ids, sums);
  ASSERT_EQ(ended.size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(ended[i].ok()) << keys[i] << ": " << ended[i].ToString();
  }
}

// Sends `bytes` to 127.0.0.1:port on a raw TCP connection and reads until the peer closes or
// 2 s pass. Returns true if the connection could be made.
bool SendRaw(int port, const std::string& bytes) {
  const int fd = test_util::ConnectLoopback(port);
  if (fd < 0) return false;
  (void)send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  const auto deadline = SteadyClock::now() + Millis(2000);
  char buf[4096];
  while (SteadyClock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    if (read(fd, buf, sizeof(buf)) <= 0) break;  // closed by the master
  }
  close(fd);
  return true;
}

bool StillRunning(const MasterProcess& master) {
  int status = 0;
  return waitpid(master.pid(), &status, WNOHANG) == 0;
}

TEST(MasterProcessTest, PutGetRoundTrip) {
  auto master = StartMasterAt();
  ASSERT_NE(master, nullptr);
  EXPECT_EQ(master->host(), "127.0.0.1");
  EXPECT_GT(master->port(), 0);
  auto client = ConnectToMaster(*master);
  ASSERT_NE(client, nullptr);
  EXPECT_NE(client->client_id(), 0u);

  Result<SegmentId> segment = client->MountSegment("seg-a", 64 * kMiB);
  ASSERT_TRUE(segment.ok()) << segment.status().ToString();
  const std::vector<std::string> keys = {"model@tp_rank:0@k1", "model@tp_rank:0@k2", "ключ-3"};
  PutObjects(*client, keys, 4096);

  std::vector<int> exists = client->Exists({keys[0], "missing", keys[2], ""});
  EXPECT_EQ(exists, (std::vector<int>{1, 0, 1, ToInt(ErrorCode::INVALID_KEY)}));

  const auto before = SteadyClock::now();
  std::vector<Result<ObjectReplicas>> replicas = client->GetReplicas({keys[1], "missing"});
  ASSERT_EQ(replicas.size(), 2u);
  ASSERT_TRUE(replicas[0].ok()) << replicas[0].status().ToString();
  EXPECT_EQ(replicas[0]->size, 4096u);
  EXPECT_EQ(replicas[0]->checksum, 0x1001u);
  ASSERT_EQ(replicas[0]->replicas.size(), 1u);
  EXPECT_EQ(replicas[0]->replicas[0].segment, *segment);
  EXPECT_EQ(replicas[0]->replicas[0].tier, ReplicaTier::kMemory);
  // The default 10 s lease, counted from before the request.
  EXPECT_GT(replicas[0]->lease_deadline, before + Millis(8000));
  EXPECT_LE(replicas[0]->lease_deadline, SteadyClock::now() + Millis(10000));
  EXPECT_EQ(replicas[1].code(), ErrorCode::OBJECT_NOT_FOUND);

  // Leased (GetReplicas above): remove needs force.
  EXPECT_EQ(client->Remove(keys[1], false).code(), ErrorCode::OBJECT_HAS_LEASE);
  EXPECT_TRUE(client->Remove(keys[1], true).ok());
  EXPECT_EQ(client->Exists({keys[1]}), std::vector<int>{0});

  // Revoke: a pending put never becomes readable.
  std::vector<Result<PutStartResult>> pending = client->PutStart({"pending"}, {100}, {});
  ASSERT_TRUE(pending[0].ok());
  EXPECT_EQ(client->Exists({"pending"}), std::vector<int>{0});
  EXPECT_TRUE(client->PutRevoke({"pending"}, {pending[0]->put_id})[0].ok());
  EXPECT_EQ(client->PutEnd({"pending"}, {pending[0]->put_id}, {1})[0].code(),
            ErrorCode::OBJECT_NOT_FOUND);

  MasterStats stats = client->Stats();
  EXPECT_EQ(stats.objects, 2u);
  EXPECT_EQ(client->RemoveAll(true), 2u);
  EXPECT_TRUE(client->UnmountSegment(*segment).ok());
  Result<MasterProcessStats> process = client->ProcessStats();
  ASSERT_TRUE(process.ok());
  EXPECT_EQ(process->segments, 0u);
  EXPECT_EQ(process->clients, 1u);

  client.reset();
  std::optional<int> exit_status = master->Stop();
  ASSERT_TRUE(exit_status.has_value()) << "did not stop on SIGTERM";
  EXPECT_TRUE(WIFEXITED(*exit_status) && WEXITSTATUS(*exit_status) == 0);
}

TEST(MasterProcessTest, BadRequestsGetErrorsNotCrashes) {
  auto master = StartMasterAt();
  ASSERT_NE(master, nullptr);
  auto client = ConnectToMaster(*master);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->MountSegment("seg", 16 * kMiB).ok());

  // Mismatched repeated lengths: the whole batch fails with INVALID_PARAMS.
  std::vector<Result<PutStartResult>> started = client->PutStart({"a", "b"}, {10}, {});
  ASSERT_EQ(started.size(), 2u);
  EXPECT_EQ(started[0].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(started[1].code(), ErrorCode::INVALID_PARAMS);
  std::vector<Status> ended = client->PutEnd({"a", "b"}, {1}, {1, 2});
  EXPECT_EQ(ended[1].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_NE(ended[1].message().find("put_ids"), std::string::npos) << ended[1].ToString();
  ReplicateConfig groups;
  groups.group_ids = {"g"};
  EXPECT_EQ(client->PutStart({"a", "b"}, {1, 1}, groups)[0].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(client->PromoteEnd({"a"}, {}, {true})[0].code(), ErrorCode::INVALID_PARAMS);

  // Over-long and empty keys: per key, neighbours unaffected.
  const std::string long_key(kMaxKeyLength + 1, 'x');
  started = client->PutStart({long_key, "fine", ""}, {1, 1, 1}, {});
  EXPECT_EQ(started[0].code(), ErrorCode::INVALID_KEY);
  EXPECT_TRUE(started[1].ok());
  EXPECT_EQ(started[2].code(), ErrorCode::INVALID_KEY);

  // A key that is not UTF-8 fails alone, with a message; the response still parses (text
  // fields are bytes on the wire).
  started = client->PutStart({"utf8-ok", std::string("bad\xff\xfe", 5)}, {1, 1}, {});
  EXPECT_TRUE(started[0].ok()) << started[0].status().ToString();
  EXPECT_EQ(started[1].code(), ErrorCode::INVALID_KEY);
  EXPECT_FALSE(started[1].status().message().empty());
  EXPECT_EQ(client->Exists({std::string("\xc0\x80", 2), "fine"}),
            (std::vector<int>{ToInt(ErrorCode::INVALID_KEY), 0}));
  // PromoteEnd's "no promotion of <key>" quotes the key bytes: with proto3 `string` messages
  // the whole response failed to parse (found by fuzz_req_PromoteEnd).
  ended = client->PromoteEnd({"never-put", std::string("bad\xff", 4)}, {1, 2}, {true, true});
  EXPECT_EQ(ended[0].code(), ErrorCode::OBJECT_NOT_FOUND) << ended[0].ToString();
  EXPECT_EQ(ended[1].code(), ErrorCode::OBJECT_NOT_FOUND) << ended[1].ToString();
  EXPECT_NE(ended[1].message().find(std::string("bad\xff", 4)), std::string::npos);

  // Segments another client owns, or none: refused.
  EXPECT_EQ(client->UnmountSegment(4242).code(), ErrorCode::SEGMENT_NOT_FOUND);
  EXPECT_EQ(client->AddDiskReplicas(4242, {DiskRecord{"k", {}, 0}})[0].code(),
            ErrorCode::SEGMENT_NOT_FOUND);
  EXPECT_EQ(client->DropDiskReplicas(4242, 0, 0, {"k"}), 0u);
  EXPECT_EQ(client->MountSegment("", 1).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(client->MountSegment("seg", 1).code(), ErrorCode::SEGMENT_ALREADY_EXISTS);

  EXPECT_TRUE(client->Ping().ok());
  EXPECT_TRUE(StillRunning(*master));
}

TEST(MasterProcessTest, TwoClientsSeeEachOthersObjects) {
  auto master = StartMasterAt();
  ASSERT_NE(master, nullptr);
  auto a = ConnectToMaster(*master, Millis(100), "host-a");
  auto b = ConnectToMaster(*master, Millis(100), "host-b");
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->client_id(), b->client_id());

  Result<SegmentId> seg_a = a->MountSegment("seg-a", 16 * kMiB);
  Result<SegmentId> seg_b = b->MountSegment("seg-b", 16 * kMiB);
  ASSERT_TRUE(seg_a.ok() && seg_b.ok());
  PutObjects(*a, {"from-a-1", "from-a-2"}, 1000, "seg-a");
  PutObjects(*b, {"from-b-1"}, 2000, "seg-b");

  EXPECT_EQ(b->Exists({"from-a-1", "from-a-2", "from-b-1"}), (std::vector<int>{1, 1, 1}));
  std::vector<Result<ObjectReplicas>> seen = a->GetReplicas({"from-b-1"});
  ASSERT_TRUE(seen[0].ok());
  EXPECT_EQ(seen[0]->size, 2000u);
  EXPECT_EQ(seen[0]->replicas[0].segment, *seg_b);

  // b cannot unmount a's segment.
  EXPECT_EQ(b->UnmountSegment(*seg_a).code(), ErrorCode::SEGMENT_NOT_FOUND);
  Result<MasterProcessStats> stats = a->ProcessStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->clients, 2u);
  EXPECT_EQ(stats->segments, 2u);

  // A clean exit of b unregisters it: its segment and objects go at once.
  b.reset();
  EXPECT_EQ(a->Exists({"from-a-1", "from-b-1"}), (std::vector<int>{1, 0}));
  stats = a->ProcessStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->clients, 1u);
  EXPECT_EQ(stats->segments, 1u);
  EXPECT_EQ(stats->expired_clients, 0u);
}

TEST(MasterProcessTest, SilentClientExpiresAndItsObjectsGo) {
  constexpr int kTtlMs = 1500;  // 15 heartbeats of the live client: robust on a loaded box
  auto master = StartMasterAt(0, {"--client-ttl-ms", std::to_string(kTtlMs)});
  ASSERT_NE(master, nullptr);
  auto live = ConnectToMaster(*master, Millis(100), "live-host");
  auto silent = ConnectToMaster(*master, Millis(0), "silent-host");  // never heartbeats
  ASSERT_TRUE(live && silent);
  ASSERT_TRUE(live->MountSegment("live-seg", 16 * kMiB).ok());
  Result<SegmentId> silent_seg = silent->MountSegment("silent-seg", 16 * kMiB);
  ASSERT_TRUE(silent_seg.ok());
  const auto mounted = SteadyClock::now();
  PutObjects(*live, {"live-1", "live-2"}, 100, "live-seg");
  PutObjects(*silent, {"silent-1", "silent-2"}, 100, "silent-seg");
  ASSERT_EQ(live->Exists({"silent-1", "silent-2"}), (std::vector<int>{1, 1}));

  ASSERT_TRUE(WaitFor(
      [&] {
        std::vector<Result<ObjectReplicas>> r = live->GetReplicas({"silent-1"});
        return r[0].code() == ErrorCode::OBJECT_NOT_FOUND;
      },
      Millis(5000)))
      << "the silent client's objects are still there";
  EXPECT_GE(SteadyClock::now() - mounted, Millis(kTtlMs - 100));  // not before the TTL
  EXPECT_EQ(live->GetReplicas({"silent-2"})[0].code(), ErrorCode::OBJECT_NOT_FOUND);
  EXPECT_EQ(live->Exists({"live-1", "live-2"}), (std::vector<int>{1, 1}));  // heartbeating
  Result<MasterProcessStats> stats = live->ProcessStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->expired_clients, 1u);
  EXPECT_EQ(stats->clients, 1u);
  EXPECT_EQ(stats->segments, 1u);

  // The silent client comes back: its heartbeat is refused, it registers again and re-mounts.
  EXPECT_TRUE(silent->Ping().ok());
  EXPECT_EQ(silent->registrations(), 2u);
  EXPECT_NE(silent->CurrentSegmentId(*silent_seg), 0u);
  stats = live->ProcessStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->segments, 2u);
}

// A TTL shorter than the configured heartbeat interval: the client learns the TTL when it
// registers and beats 3 times per TTL, so it is never expired while alive.
TEST(MasterProcessTest, ShortTtlShortensTheHeartbeat) {
  auto master = StartMasterAt(0, {"--client-ttl-ms", "600"});
  ASSERT_NE(master, nullptr);
  auto client = ConnectToMaster(*master, Millis(1000), "short-ttl-host");  // 1 s > 600 ms TTL
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->MountSegment("short-ttl-seg", 16 * kMiB).ok());
  std::this_thread::sleep_for(Millis(2500));  // 4 TTLs
  Result<MasterProcessStats> stats = client->ProcessStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->expired_clients, 0u);
  EXPECT_EQ(stats->segments, 1u);
  EXPECT_EQ(client->registrations(), 1u);
}

TEST(MasterProcessTest, MasterRestartReRegistersAndRemounts) {
  auto master = StartMasterAt();
  ASSERT_NE(master, nullptr);
  const int port = master->port();
  auto client = ConnectToMaster(*master, Millis(100));
  ASSERT_NE(client, nullptr);
  Result<SegmentId> segment = client->MountSegment("restart-seg", 16 * kMiB);
  ASSERT_TRUE(segment.ok());
  PutObjects(*client, {"before-restart"}, 100);
  const uint64_t first_id = client->client_id();

  master->Kill();  // SIGKILL: no goodbye
  std::vector<int> down = client->Exists({"before-restart", "other"});
  EXPECT_EQ(down, (std::vector<int>{ToInt(ErrorCode::RPC_FAIL), ToInt(ErrorCode::RPC_FAIL)}));
  std::vector<Status> put_down = client->PutEnd({"x"}, {1}, {1});
  EXPECT_EQ(put_down[0].code(), ErrorCode::RPC_FAIL);
  EXPECT_NE(put_down[0].message().find(master->address()), std::string::npos)
      << put_down[0].ToString();

  master = StartMasterAt(port);  // same port, empty metadata
  ASSERT_NE(master, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return client->registrations() >= 2 && client->connected(); }, Millis(10000)))
      << "the client did not register again with the restarted master";
  ASSERT_TRUE(WaitFor([&] { return client->CurrentSegmentId(*segment) != 0; }, Millis(5000)));
  EXPECT_NE(client->client_id(), first_id);

  // The metadata died with the old master; the client carries on with new puts.
  EXPECT_EQ(client->Exists({"before-restart"}), std::vector<int>{0});
  PutObjects(*client, {"after-restart"}, 100, "restart-seg");
  EXPECT_EQ(client->Exists({"after-restart"}), std::vector<int>{1});
  Result<MasterProcessStats> stats = client->ProcessStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->clients, 1u);
  EXPECT_EQ(stats->segments, 1u);
  // The handle still unmounts the re-mounted segment.
  EXPECT_TRUE(client->UnmountSegment(*segment).ok());
  stats = client->ProcessStats();
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->segments, 0u);
}

TEST(MasterProcessTest, WrongAddressFailsClearlyWithinTheConnectTimeout) {
  const Millis timeout(500);
  // Nothing listens; a host that does not resolve; a TCP listener that never speaks HTTP/2.
  const int silent_fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(silent_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(silent_fd, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(silent_fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  const std::vector<std::string> addresses = {"127.0.0.1:" + std::to_string(FreePort()),
                                              "no-such-host.invalid:50051",
                                              "127.0.0.1:" + std::to_string(ntohs(addr.sin_port))};
  for (const std::string& address : addresses) {
    const auto start = SteadyClock::now();
    Result<std::unique_ptr<RemoteMaster>> connected = RemoteMaster::Connect(address, timeout);
    const auto took = SteadyClock::now() - start;
    ASSERT_FALSE(connected.ok()) << address;
    EXPECT_EQ(connected.code(), ErrorCode::RPC_FAIL) << connected.status().ToString();
    const std::string& message = connected.status().message();
    std::cerr << "  " << connected.status().ToString() << "\n";
    EXPECT_NE(message.find(address), std::string::npos) << message;
    EXPECT_NE(message.find("500 ms"), std::string::npos) << message;
    EXPECT_LT(took, timeout + Millis(1000)) << address << ": " << message;
  }
  close(silent_fd);
  EXPECT_EQ(RemoteMaster::Connect("", timeout).code(), ErrorCode::INVALID_PARAMS);
}

TEST(MasterProcessTest, SecondMasterOnTheSamePortIsRefused) {
  auto master = StartMasterAt();
  ASSERT_NE(master, nullptr);
  MasterProcessOptions options;
  options.binary = TIERKV_BINARY;
  options.args = {"--host",         "127.0.0.1", "--port", std::to_string(master->port()),
                  "--metrics-port", "-1"};
  Result<std::unique_ptr<MasterProcess>> second = MasterProcess::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("exited with status 1"), std::string::npos)
      << second.status().ToString();
  EXPECT_TRUE(StillRunning(*master));
}

TEST(MasterProcessTest, GarbageOnTheGrpcPortDoesNotKillTheMaster) {
  auto master = StartMasterAt();
  ASSERT_NE(master, nullptr);
  std::mt19937_64 rng(7);
  std::string random(8192, '\0');
  for (char& c : random) c = static_cast<char>(rng());
  const std::string preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
  // A frame header claiming 16 MiB of payload, then too little of it.
  const std::string huge_frame = std::string("\xff\xff\xff\x00\x00\x00\x00\x00\x01", 9) + "abc";
  const std::vector<std::string> inputs = {random,
                                           preface.substr(0, 10),
                                           preface + random,
                                           preface + huge_frame,
                                           "GET / HTTP/1.1\r\nHost: x\r\n\r\n",
                                           std::string(1 << 16, '\0')};
  for (const std::string& input : inputs) {
    ASSERT_TRUE(SendRaw(master->port(), input));
    ASSERT_TRUE(StillRunning(*master));
  }

  // gRPC calls whose payloads are garbage: an error reply (or a harmless parse), no crash.
  auto channel = grpc::CreateChannel(master->address(), grpc::InsecureChannelCredentials());
  grpc::GenericStub generic(channel);
  const std::vector<std::string> methods = {
      "Exists",          "PutStart",   "PutEnd",         "GetReplicas", "MountSegment",
      "AddDiskReplicas", "PromoteEnd", "RegisterClient", "Heartbeat",   "Stats"};
  for (const std::string& method : methods) {
    for (size_t size : {size_t{1}, size_t{7}, size_t{100}, size_t{5000}}) {
      grpc::Slice slice(random.data(), size);
      grpc::ByteBuffer request(&slice, 1);
      grpc::ByteBuffer response;
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      grpc::Status status;
      generic.UnaryCall(&context, "/tierkv.rpc.Master/" + method, grpc::StubOptions(), &request,
                        &response, [&](grpc::Status s) {
                          std::lock_guard lock(mu);
                          status = std::move(s);
                          done = true;
                          cv.notify_all();
                        });
      std::unique_lock lock(mu);
      ASSERT_TRUE(cv.wait_for(lock, std::chrono::seconds(5), [&] { return done; })) << method;
    }
    ASSERT_TRUE(StillRunning(*master)) << method;
  }

  auto client = ConnectToMaster(*master);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->MountSegment("after-garbage", 16 * kMiB).ok());
  PutObjects(*client, {"still-works"}, 10);
  EXPECT_EQ(client->Exists({"still-works"}), std::vector<int>{1});
}

}  // namespace
}  // namespace tierkv
