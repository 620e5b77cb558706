// The cross-host UCX transport in one process, over 127.0.0.1: the message codec, transport
// selection, UcxSegmentServer and UcxSegmentClient (byte-exact transfers, errors, bounds checks,
// malformed messages from a bare UCX peer, Stop, threads). A forked server that is SIGKILLed or
// SIGSTOPped is in tests/integration/ucx_process_test.cc; throughput against raw TCP is
// `tierkv bench remote`'s (bench/remote_bench.cc, its tcp rows).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "memory/memory_segment.h"
#include "pattern_test_util.h"
#include "transport/ucx_options.h"
#include "transport/ucx_protocol.h"
#include "transport/ucx_segment_client.h"
#include "transport/ucx_segment_server.h"
#include "transport/ucx_worker.h"
#include "transport_test_util.h"

namespace tierkv::transport {
namespace {

namespace fs = std::filesystem;
using test_util::PatternByte;
using testing::Millis;
using testing::Refused;
using testing::WaitUntil;
using SteadyClock = std::chrono::steady_clock;
using ReadOp = UcxSegmentClient::ReadOp;
using WriteOp = UcxSegmentClient::WriteOp;

constexpr uint64_t kUcxSegmentSize = uint64_t{16} << 20;
constexpr const char* kUcxSegmentName = "store-0/dram";
constexpr Millis kUcxTimeout{5000};

bool HasVerbsDevices() {
  std::error_code error;
  return fs::is_directory("/sys/class/infiniband", error) &&
         !fs::is_empty("/sys/class/infiniband", error);
}

std::shared_ptr<MemorySegment> MakeSegment(uint64_t size = kUcxSegmentSize, uint8_t seed = 7) {
  auto segment = MemorySegment::Create(kUcxSegmentName, size, PagePolicy::kSmallPages);
  EXPECT_TRUE(segment.ok()) << segment.status().ToString();
  std::shared_ptr<MemorySegment> shared = std::move(*segment);
  for (uint64_t i = 0; i < shared->size(); ++i) shared->base()[i] = PatternByte(i, seed);
  return shared;
}

// ---- The message codec ------------------------------------------------------------------------

TEST(UcxProtocolTest, RequestAndReplyRoundTrip) {
  UcxRequest request;
  request.op = UcxOp::kWrite;
  request.id = 0x1122334455667788;
  request.offset = uint64_t{3} << 40;
  request.length = 12345;
  const UcxHeader header = EncodeUcxRequest(request);
  EXPECT_EQ(std::memcmp(header.data(), "TKVU", 4), 0);
  Result<UcxRequest> decoded = DecodeUcxRequest(header.data(), header.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->op, UcxOp::kWrite);
  EXPECT_EQ(decoded->id, request.id);
  EXPECT_EQ(decoded->offset, request.offset);
  EXPECT_EQ(decoded->length, request.length);

  UcxReply reply;
  reply.op = UcxOp::kRead;
  reply.id = 42;
  reply.status = ToInt(ErrorCode::INVALID_PARAMS);
  reply.value = 99;
  const UcxHeader reply_header = EncodeUcxReply(reply);
  Result<UcxReply> decoded_reply = DecodeUcxReply(reply_header.data(), reply_header.size());
  ASSERT_TRUE(decoded_reply.ok());
  EXPECT_EQ(decoded_reply->op, UcxOp::kRead);
  EXPECT_EQ(decoded_reply->id, 42u);
  EXPECT_EQ(decoded_reply->status, ToInt(ErrorCode::INVALID_PARAMS));
  EXPECT_EQ(decoded_reply->value, 99u);
}

TEST(UcxProtocolTest, GarbageIsRejected) {
  UcxHeader good = EncodeUcxRequest(UcxRequest{});
  for (size_t size = 0; size < kUcxHeaderSize; ++size) {
    EXPECT_TRUE(Refused(DecodeUcxRequest(good.data(), size).status(), ErrorCode::INVALID_PARAMS,
                        {"header of"}));
  }
  std::vector<uint8_t> longer(good.begin(), good.end());
  longer.push_back(0);
  EXPECT_FALSE(DecodeUcxRequest(longer.data(), longer.size()).ok());

  UcxHeader bad_magic = good;
  bad_magic[0] = 'X';
  EXPECT_TRUE(Refused(DecodeUcxRequest(bad_magic.data(), bad_magic.size()).status(),
                      ErrorCode::INVALID_PARAMS, {"magic"}));
  UcxHeader bad_version = good;
  bad_version[4] = 9;
  EXPECT_TRUE(Refused(DecodeUcxReply(bad_version.data(), bad_version.size()).status(),
                      ErrorCode::INVALID_PARAMS, {"version 9"}));
  for (uint16_t op : {0, 5, 0xffff}) {
    UcxHeader bad_op = good;
    std::memcpy(bad_op.data() + 6, &op, sizeof(op));
    EXPECT_TRUE(Refused(DecodeUcxRequest(bad_op.data(), bad_op.size()).status(),
                        ErrorCode::INVALID_PARAMS, {"unknown op"}));
  }
  std::mt19937_64 random(1);
  for (int i = 0; i < 10000; ++i) {
    UcxHeader noise;
    for (uint8_t& byte : noise) byte = static_cast<uint8_t>(random());
    if (i % 2 == 0) std::memcpy(noise.data(), kUcxMagic, sizeof(kUcxMagic));
    (void)DecodeUcxRequest(noise.data(), noise.size());
    (void)DecodeUcxReply(noise.data(), noise.size());
  }
}

// ---- Transport selection ------------------------------------------------------------------------

// A fake sysfs with the given network interfaces and verbs devices.
class FakeSysfs {
 public:
  FakeSysfs(const std::vector<std::string>& interfaces, const std::vector<std::string>& verbs) {
    root_ = fs::temp_directory_path() /
            ("tkvucx" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::remove_all(root_);
    fs::create_directories(root_ / "class" / "net");
    for (const std::string& name : interfaces) fs::create_directories(root_ / "class/net" / name);
    if (!verbs.empty()) fs::create_directories(root_ / "class" / "infiniband");
    for (const std::string& name : verbs) {
      fs::create_directories(root_ / "class/infiniband" / name);
    }
  }
  ~FakeSysfs() {
    std::error_code ignored;
    fs::remove_all(root_, ignored);
  }
  std::string root() const { return root_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path root_;
};

UcxTransportOptions Options(const std::string& protocol, const std::string& device = "") {
  UcxTransportOptions options;
  options.protocol = protocol;
  options.device = device;
  return options;
}

TEST(UcxSelectionTest, TcpUsesEveryInterfaceOrTheNamedOne) {
  FakeSysfs sysfs({"eth0", "lo"}, {});
  Result<UcxTransportSelection> any = SelectUcxTransports(Options("tcp"), sysfs.root());
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(any->transports, "tcp");
  EXPECT_EQ(any->net_devices, "all");
  Result<UcxTransportSelection> eth0 = SelectUcxTransports(Options("tcp", "eth0"), sysfs.root());
  ASSERT_TRUE(eth0.ok());
  EXPECT_EQ(eth0->net_devices, "eth0");
  EXPECT_TRUE(Refused(SelectUcxTransports(Options("tcp", "eth9"), sysfs.root()).status(),
                      ErrorCode::UNAVAILABLE_IN_CURRENT_MODE, {"\"eth9\"", "eth0, lo"}));
  EXPECT_TRUE(Refused(SelectUcxTransports(Options("tcp", "mlx5_0:1"), sysfs.root()).status(),
                      ErrorCode::INVALID_CONFIG, {"not a network interface name"}));
}

TEST(UcxSelectionTest, RdmaNeedsAVerbsDevice) {
  FakeSysfs none({"eth0"}, {});
  EXPECT_TRUE(Refused(SelectUcxTransports(Options("rdma"), none.root()).status(),
                      ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                      {"RDMA (verbs) device", "has none", "infiniband", "use protocol \"tcp\""}));

  FakeSysfs two({"eth0"}, {"mlx5_0", "mlx5_1"});
  Result<UcxTransportSelection> any = SelectUcxTransports(Options("rdma"), two.root());
  ASSERT_TRUE(any.ok()) << any.status().ToString();
  EXPECT_EQ(any->transports, "rc,ud");
  EXPECT_EQ(any->net_devices, "all");
  Result<UcxTransportSelection> port1 = SelectUcxTransports(Options("rdma", "mlx5_1"), two.root());
  ASSERT_TRUE(port1.ok());
  EXPECT_EQ(port1->net_devices, "mlx5_1:1");
  Result<UcxTransportSelection> port2 =
      SelectUcxTransports(Options("rdma", "mlx5_0:2"), two.root());
  ASSERT_TRUE(port2.ok());
  EXPECT_EQ(port2->net_devices, "mlx5_0:2");
  EXPECT_TRUE(Refused(SelectUcxTransports(Options("rdma", "mlx5_7"), two.root()).status(),
                      ErrorCode::UNAVAILABLE_IN_CURRENT_MODE, {"\"mlx5_7\"", "mlx5_0, mlx5_1"}));
  EXPECT_TRUE(Refused(SelectUcxTransports(Options("rdma", "mlx5_0:x"), two.root()).status(),
                      ErrorCode::INVALID_CONFIG, {"not a verbs device name"}));
}

TEST(UcxSelectionTest, UnknownProtocolBadTimeoutAndSpinAreConfigErrors) {
  EXPECT_TRUE(Refused(SelectUcxTransports(Options("ib")).status(), ErrorCode::INVALID_CONFIG,
                      {"protocol \"ib\"", "\"tcp\", \"rdma\""}));
  UcxTransportOptions options;
  options.io_timeout = Millis(0);
  EXPECT_TRUE(
      Refused(SelectUcxTransports(options).status(), ErrorCode::INVALID_CONFIG, {"io_timeout"}));
  options.io_timeout = Millis(1);
  options.spin = std::chrono::microseconds(-1);
  EXPECT_TRUE(Refused(SelectUcxTransports(options).status(), ErrorCode::INVALID_CONFIG, {"spin"}));
}

TEST(UcxSelectionTest, RdmaOnThisHostIsAClearError) {
  if (HasVerbsDevices()) GTEST_SKIP() << "this host has verbs devices";
  const UcxTransportOptions rdma = Options("rdma");
  auto server = UcxSegmentServer::Start(MakeSegment(1 << 20), "127.0.0.1", 0, rdma);
  EXPECT_TRUE(Refused(server.status(), ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                      {"protocol \"rdma\"", "RDMA (verbs) device", "use protocol \"tcp\""}));
  auto client = UcxSegmentClient::Connect("127.0.0.1:1", kUcxSegmentName, kUcxTimeout, rdma);
  EXPECT_TRUE(Refused(client.status(), ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                      {"protocol \"rdma\"", "RDMA (verbs) device"}));
}

// ---- Server and client --------------------------------------------------------------------------

class UcxTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    segment_ = MakeSegment();
    auto server = UcxSegmentServer::Start(segment_, "127.0.0.1", 0);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(*server);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Stop();
  }

  std::unique_ptr<UcxSegmentClient> Connect(const UcxTransportOptions& options = {}) {
    auto client =
        UcxSegmentClient::Connect(server_->address(), kUcxSegmentName, kUcxTimeout, options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::shared_ptr<MemorySegment> segment_;
  std::unique_ptr<UcxSegmentServer> server_;
};

TEST_F(UcxTransportTest, HandshakeReportsTheSegmentSize) {
  EXPECT_EQ(server_->address().rfind("127.0.0.1:", 0), 0u) << server_->address();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->size(), segment_->size());
  EXPECT_EQ(client->segment_name(), kUcxSegmentName);
  EXPECT_TRUE(client->alive());
  EXPECT_TRUE(WaitUntil([&] { return server_->open_endpoints() == 1; }));
  client.reset();
  EXPECT_TRUE(WaitUntil([&] { return server_->open_endpoints() == 0; }, Millis(3000)));
}

// Ranges of every interesting shape: 2 MiB and 256 KiB, odd sizes at odd offsets, the very
// start and end of the segment, and ops split into several pieces.
struct Range {
  uint64_t offset;
  uint64_t size;
  int pieces;
};
std::vector<Range> InterestingRanges(uint64_t segment_size) {
  std::vector<Range> ranges = {
      {0, 2 << 20, 1},           {2 << 20, 256 << 10, 1},
      {(4 << 20) + 1, 1, 1},     {(5 << 20) + 3, 4093, 1},
      {(6 << 20) + 7, 65537, 3}, {(7 << 20) + 11, 300001, 5},
      {8 << 20, 2 << 20, 4},     {segment_size - 12345, 12344, 2},
      {segment_size - 1, 1, 1},  {(11 << 20) + 5, (1 << 20) + 17, 1},
  };
  std::mt19937_64 random(3);
  for (int i = 0; i < 40; ++i) {
    const uint64_t size = 1 + random() % (600 << 10);
    const uint64_t offset = random() % (segment_size - size);
    ranges.push_back({offset, size, 1 + static_cast<int>(random() % 4)});
  }
  return ranges;
}

// Splits [0, size) of `buffer` into `count` uneven pieces (some may be empty).
template <typename Piece, typename Byte>
std::vector<Piece> Split(Byte* buffer, uint64_t size, int count) {
  std::vector<Piece> pieces;
  uint64_t done = 0;
  for (int i = 0; i < count; ++i) {
    const uint64_t part = i + 1 == count ? size - done : (size - done) / 3 + (i % 2);
    pieces.push_back(Piece{buffer + done, part});
    done += part;
  }
  return pieces;
}

TEST_F(UcxTransportTest, WritesAndReadsAreByteExact) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  // Non-overlapping ranges only, so the expected bytes are well defined: keep the fixed ones.
  std::vector<Range> ranges = InterestingRanges(segment_->size());
  ranges.resize(10);
  std::vector<std::vector<uint8_t>> sources;
  std::vector<WriteOp> writes;
  for (size_t r = 0; r < ranges.size(); ++r) {
    sources.emplace_back(ranges[r].size);
    for (uint64_t i = 0; i < ranges[r].size; ++i) sources[r][i] = PatternByte(i, 100 + r);
  }
  for (size_t r = 0; r < ranges.size(); ++r) {
    writes.push_back(
        {ranges[r].offset, Split<ConstPiece>(sources[r].data(), ranges[r].size, ranges[r].pieces)});
  }
  std::vector<Status> wrote = client->WriteBatch(writes);
  ASSERT_EQ(wrote.size(), writes.size());
  for (size_t r = 0; r < ranges.size(); ++r) {
    ASSERT_TRUE(wrote[r].ok()) << r << ": " << wrote[r].ToString();
    ASSERT_EQ(std::memcmp(segment_->base() + ranges[r].offset, sources[r].data(), ranges[r].size),
              0)
        << "range " << r << " landed wrong in the segment";
  }
  // Bytes around the written ranges are untouched.
  EXPECT_EQ(segment_->base()[(4 << 20)], PatternByte(4 << 20, 7));
  EXPECT_EQ(segment_->base()[(4 << 20) + 2], PatternByte((4 << 20) + 2, 7));

  std::vector<std::vector<uint8_t>> targets;
  std::vector<ReadOp> reads;
  for (const Range& range : ranges) targets.emplace_back(range.size, 0xEE);
  for (size_t r = 0; r < ranges.size(); ++r) {
    reads.push_back(
        {ranges[r].offset, Split<MutPiece>(targets[r].data(), ranges[r].size, ranges[r].pieces)});
  }
  std::vector<Status> read = client->ReadBatch(reads);
  for (size_t r = 0; r < ranges.size(); ++r) {
    ASSERT_TRUE(read[r].ok()) << r << ": " << read[r].ToString();
    EXPECT_EQ(targets[r], sources[r]) << "range " << r;
  }
}

TEST_F(UcxTransportTest, ManyRandomReadsMatchTheSegment) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const std::vector<Range> ranges = InterestingRanges(segment_->size());
  std::vector<std::vector<uint8_t>> targets;
  std::vector<ReadOp> reads;
  for (const Range& range : ranges) targets.emplace_back(range.size, 0);
  for (size_t r = 0; r < ranges.size(); ++r) {
    reads.push_back(
        {ranges[r].offset, Split<MutPiece>(targets[r].data(), ranges[r].size, ranges[r].pieces)});
  }
  for (int round = 0; round < 3; ++round) {
    std::vector<Status> read = client->ReadBatch(reads);
    for (size_t r = 0; r < ranges.size(); ++r) {
      ASSERT_TRUE(read[r].ok()) << r << ": " << read[r].ToString();
      ASSERT_EQ(std::memcmp(targets[r].data(), segment_->base() + ranges[r].offset, ranges[r].size),
                0)
          << "range " << r << " at " << ranges[r].offset << " size " << ranges[r].size;
    }
  }
}

TEST_F(UcxTransportTest, OutOfBoundsRangesFailAndOthersInTheBatchSucceed) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  const uint64_t size = segment_->size();
  std::vector<uint8_t> buffer(4096);
  std::vector<ReadOp> reads = {
      {size - 100, {{buffer.data(), 101}}},         // one byte past the end
      {0, {{buffer.data(), 4096}}},                 // fine
      {size + 1, {}},                               // empty, but starts past the end
      {~uint64_t{0} - 10, {{buffer.data(), 100}}},  // offset + size wraps around
      {16, {{nullptr, 10}}},                        // a piece without a buffer
      {size, {}},                                   // empty at the end: fine
  };
  std::vector<Status> read = client->ReadBatch(reads);
  EXPECT_TRUE(Refused(read[0], ErrorCode::INVALID_PARAMS, {"outside the segment", "read of"}));
  EXPECT_TRUE(read[1].ok()) << read[1].ToString();
  EXPECT_EQ(std::memcmp(buffer.data(), segment_->base(), 4096), 0);
  EXPECT_TRUE(Refused(read[2], ErrorCode::INVALID_PARAMS, {"outside the segment"}));
  EXPECT_TRUE(Refused(read[3], ErrorCode::INVALID_PARAMS, {"outside the segment"}));
  EXPECT_TRUE(Refused(read[4], ErrorCode::INVALID_PARAMS, {"no buffer"}));
  EXPECT_TRUE(read[5].ok()) << read[5].ToString();

  std::vector<WriteOp> writes = {{size - 10, {{buffer.data(), 11}}}};
  std::vector<Status> wrote = client->WriteBatch(writes);
  EXPECT_TRUE(Refused(wrote[0], ErrorCode::INVALID_PARAMS, {"write of", "outside the segment"}));
  EXPECT_EQ(segment_->base()[size - 10], PatternByte(size - 10, 7)) << "nothing was written";
  EXPECT_TRUE(client->alive());
}

TEST_F(UcxTransportTest, WrongSegmentNameIsRefusedClearly) {
  auto client = UcxSegmentClient::Connect(server_->address(), "store-9/dram", kUcxTimeout);
  EXPECT_TRUE(Refused(client.status(), ErrorCode::SEGMENT_NOT_FOUND,
                      {server_->address(), "store-9/dram", "another segment"}));
  // The server keeps serving the right name.
  EXPECT_NE(Connect(), nullptr);
}

TEST_F(UcxTransportTest, BadArgumentsAreRefused) {
  for (const std::string address : {"127.0.0.1", "127.0.0.1:", ":5000", "127.0.0.1:99999",
                                    "127.0.0.1:0", "::1:5000", "host:port"}) {
    EXPECT_TRUE(Refused(UcxSegmentClient::Connect(address, kUcxSegmentName, kUcxTimeout).status(),
                        ErrorCode::INVALID_PARAMS, {address}))
        << address;
  }
  EXPECT_TRUE(Refused(UcxSegmentClient::Connect(server_->address(), "", kUcxTimeout).status(),
                      ErrorCode::INVALID_PARAMS, {"segment name"}));
  EXPECT_TRUE(Refused(
      UcxSegmentClient::Connect(server_->address(), std::string(4097, 'x'), kUcxTimeout).status(),
      ErrorCode::INVALID_PARAMS, {"segment name"}));
  EXPECT_TRUE(
      Refused(UcxSegmentClient::Connect(server_->address(), kUcxSegmentName, Millis(0)).status(),
              ErrorCode::INVALID_PARAMS, {"timeout"}));
  EXPECT_TRUE(Refused(UcxSegmentServer::Start(nullptr, "127.0.0.1", 0).status(),
                      ErrorCode::INVALID_PARAMS, {"no segment"}));
  EXPECT_TRUE(Refused(UcxSegmentServer::Start(segment_, "127.0.0.1", 70000).status(),
                      ErrorCode::INVALID_PARAMS, {"70000"}));
  EXPECT_TRUE(Refused(UcxSegmentServer::Start(segment_, "no-such-host.invalid", 0).status(),
                      ErrorCode::TRANSFER_FAIL, {"no-such-host.invalid"}));
  EXPECT_TRUE(Refused(UcxSegmentServer::Start(segment_, "127.0.0.1", 0, Options("udp")).status(),
                      ErrorCode::INVALID_CONFIG, {"protocol \"udp\""}));
}

TEST_F(UcxTransportTest, ConnectWithoutAServerFailsQuicklyAndNamesTheAddress) {
  // A port nobody listens on: bind one, note it, close it.
  UniqueFd probe(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(probe.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&address), &length), 0);
  const std::string target = "127.0.0.1:" + std::to_string(ntohs(address.sin_port));
  probe.Reset();
  const auto start = SteadyClock::now();
  auto client = UcxSegmentClient::Connect(target, kUcxSegmentName, kUcxTimeout);
  EXPECT_TRUE(Refused(client.status(), ErrorCode::TRANSFER_FAIL, {target}));
  EXPECT_LT(SteadyClock::now() - start, kUcxTimeout) << client.status().ToString();
}

TEST_F(UcxTransportTest, StopFailsCallsQuicklyAndClientsTurnDead) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<uint8_t> buffer(2 << 20);
  ASSERT_TRUE(client->ReadBatch({{0, {{buffer.data(), buffer.size()}}}})[0].ok());
  server_->Stop();
  server_->Stop();  // idempotent
  EXPECT_EQ(server_->open_endpoints(), 0u);
  const auto start = SteadyClock::now();
  std::vector<Status> read = client->ReadBatch({{0, {{buffer.data(), buffer.size()}}}});
  EXPECT_TRUE(Refused(read[0], ErrorCode::TRANSFER_FAIL, {server_->address()}));
  EXPECT_LT(SteadyClock::now() - start, Millis(3000)) << "should not wait for the io timeout";
  EXPECT_FALSE(client->alive());
  // Later calls fail at once, naming the first cause.
  std::vector<Status> wrote = client->WriteBatch({{0, {{buffer.data(), 10}}}});
  EXPECT_TRUE(Refused(wrote[0], ErrorCode::TRANSFER_FAIL, {"write of"}));
}

TEST_F(UcxTransportTest, AnIdleClientNoticesTheServerStopping) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_TRUE(client->alive());
  server_->Stop();
  EXPECT_TRUE(WaitUntil([&] { return !client->alive(); }, Millis(5000)));
}

TEST_F(UcxTransportTest, ConcurrentBatchesFromFourThreadsAreByteExact) {
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 random(t);
      for (int round = 0; round < 6; ++round) {
        std::vector<std::vector<uint8_t>> targets;
        std::vector<ReadOp> reads;
        for (int i = 0; i < 8; ++i) {
          const uint64_t size = (i % 2 == 0) ? (256 << 10) : 1 + random() % (3 << 20);
          const uint64_t offset = random() % (segment_->size() - size);
          targets.emplace_back(size);
          reads.push_back({offset, {{nullptr, 0}}});
        }
        for (size_t i = 0; i < reads.size(); ++i) {
          reads[i].dst = {{targets[i].data(), targets[i].size()}};
        }
        std::vector<Status> read = client->ReadBatch(reads);
        for (size_t i = 0; i < reads.size(); ++i) {
          if (!read[i].ok() || std::memcmp(targets[i].data(), segment_->base() + reads[i].offset,
                                           targets[i].size()) != 0) {
            ++failures;
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST_F(UcxTransportTest, ManyClientsAtOnce) {
  std::vector<std::unique_ptr<UcxSegmentClient>> clients;
  for (int i = 0; i < 8; ++i) clients.push_back(Connect());
  EXPECT_TRUE(WaitUntil([&] { return server_->open_endpoints() == 8; }));
  std::vector<uint8_t> buffer(1000);
  for (auto& client : clients) {
    ASSERT_NE(client, nullptr);
    ASSERT_TRUE(client->ReadBatch({{500, {{buffer.data(), buffer.size()}}}})[0].ok());
    EXPECT_EQ(std::memcmp(buffer.data(), segment_->base() + 500, buffer.size()), 0);
  }
  clients.clear();
  EXPECT_TRUE(WaitUntil([&] { return server_->open_endpoints() == 0; }, Millis(3000)));
}

TEST(UcxLargeRangeTest, RangesLargerThanOneRequestAreSplitAndByteExact) {
  // Ranges over 16 MiB go as several requests; their pieces are cut at the request boundaries.
  constexpr uint64_t kSize = uint64_t{48} << 20;
  std::shared_ptr<MemorySegment> segment = MakeSegment(kSize, 9);
  auto server = UcxSegmentServer::Start(segment, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto client = UcxSegmentClient::Connect((*server)->address(), kUcxSegmentName, kUcxTimeout);
  ASSERT_TRUE(client.ok()) << client.status().ToString();

  constexpr uint64_t kLarge = (uint64_t{40} << 20) + 13;
  std::vector<uint8_t> source(kLarge);
  for (uint64_t i = 0; i < kLarge; ++i) source[i] = PatternByte(i, 42);
  const std::vector<ConstPiece> src = {{source.data(), (7 << 20) + 1},
                                       {source.data() + (7 << 20) + 1, 0},
                                       {source.data() + (7 << 20) + 1, 20 << 20},
                                       {source.data() + (27 << 20) + 1, kLarge - (27 << 20) - 1}};
  std::vector<uint8_t> small(1000, 0x5A);
  std::vector<Status> wrote = (*client)->WriteBatch(
      {{3, src}, {kSize - 1000, {{small.data(), small.size()}}}, {kSize - 5, {{small.data(), 6}}}});
  ASSERT_TRUE(wrote[0].ok()) << wrote[0].ToString();
  ASSERT_TRUE(wrote[1].ok()) << wrote[1].ToString();
  EXPECT_TRUE(Refused(wrote[2], ErrorCode::INVALID_PARAMS, {"outside the segment"}));
  ASSERT_EQ(std::memcmp(segment->base() + 3, source.data(), kLarge), 0);
  EXPECT_EQ(segment->base()[2], PatternByte(2, 9));
  EXPECT_EQ(segment->base()[3 + kLarge], PatternByte(3 + kLarge, 9));

  std::vector<uint8_t> target(kLarge, 0);
  std::vector<MutPiece> dst;
  for (uint64_t done = 0, part = 1; done < kLarge; part = part * 5 + 3) {
    const uint64_t size = std::min<uint64_t>(part << 10, kLarge - done);
    dst.push_back({target.data() + done, size});
    done += size;
  }
  std::vector<Status> read = (*client)->ReadBatch({{3, dst}});
  ASSERT_TRUE(read[0].ok()) << read[0].ToString();
  EXPECT_TRUE(target == source);
  (*client).reset();
  (*server)->Stop();
}

TEST(UcxLargeRangeTest, ManySmallPiecesGoThroughBounceBuffersByteExact) {
  // Runs of small pieces are gathered into (scattered out of) bounce buffers, of which a
  // connection has only a few: 24 ops of 2 MiB in 32 KiB pieces, with a large piece (sent on
  // its own) in the middle of some, keep every buffer busy and wait for them. Each piece is
  // followed by a gap of its own size in the caller's buffer: pieces adjacent in memory would
  // be merged into one request.
  constexpr uint64_t kSize = uint64_t{64} << 20;
  constexpr uint64_t kOp = uint64_t{2} << 20;
  constexpr int kOps = 24;
  std::shared_ptr<MemorySegment> segment = MakeSegment(kSize, 5);
  auto server = UcxSegmentServer::Start(segment, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  auto client = UcxSegmentClient::Connect((*server)->address(), kUcxSegmentName, kUcxTimeout);
  ASSERT_TRUE(client.ok()) << client.status().ToString();

  std::vector<uint8_t> source(2 * kOps * kOp), target(2 * kOps * kOp, 0);
  for (uint64_t i = 0; i < source.size(); ++i) source[i] = PatternByte(i, 77);
  // Op k: pieces of 32 KiB, except (for odd k) one of 1 MiB after the first 256 KiB; the
  // piece at byte `done` of the op lives at 2 x (k x kOp + done) in the buffer.
  auto cut = [&](uint8_t* base, int k, auto piece_type) {
    using Piece = decltype(piece_type);
    std::vector<Piece> pieces;
    uint64_t done = 0;
    while (done < kOp) {
      uint64_t size = (k % 2 == 1 && done == (256 << 10)) ? (1 << 20) : (32 << 10);
      size = std::min(size, kOp - done);
      pieces.push_back(Piece{base + 2 * (k * kOp + done), size});
      done += size;
    }
    return pieces;
  };
  std::vector<WriteOp> writes;
  std::vector<ReadOp> reads;
  for (int k = 0; k < kOps; ++k) {
    // Ops land at scattered offsets, in reverse order.
    const uint64_t offset = (kOps - 1 - k) * (kOp + 4096) + 7;
    writes.push_back({offset, cut(source.data(), k, ConstPiece{})});
    reads.push_back({offset, cut(target.data(), k, MutPiece{})});
  }
  for (const Status& st : (*client)->WriteBatch(writes)) ASSERT_TRUE(st.ok()) << st.ToString();
  for (int k = 0; k < kOps; ++k) {
    uint64_t at = writes[k].offset;
    for (const ConstPiece& piece : writes[k].src) {
      ASSERT_EQ(std::memcmp(segment->base() + at, piece.ptr, piece.size), 0)
          << "op " << k << " landed wrong";
      at += piece.size;
    }
  }
  for (const Status& st : (*client)->ReadBatch(reads)) ASSERT_TRUE(st.ok()) << st.ToString();
  for (int k = 0; k < kOps; ++k) {
    for (size_t i = 0; i < reads[k].dst.size(); ++i) {
      ASSERT_EQ(std::memcmp(reads[k].dst[i].ptr, writes[k].src[i].ptr, reads[k].dst[i].size), 0)
          << "op " << k << " piece " << i;
    }
  }
  (*client).reset();
  (*server)->Stop();
}

TEST_F(UcxTransportTest, AdjacentAndPartlyAdjacentPiecesAreByteExact) {
  // A 2 MiB range in 4 pieces that are adjacent in memory goes as one request; pieces that
  // only partly touch (a gap between two pairs) as two; both byte-exact.
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<uint8_t> buffer((4u << 20) + 4096, 0);
  const uint64_t q = 512 << 10;
  std::vector<MutPiece> adjacent, pairs;
  for (int i = 0; i < 4; ++i) adjacent.push_back(MutPiece{buffer.data() + i * q, q});
  for (int i = 0; i < 4; ++i) {
    pairs.push_back(MutPiece{buffer.data() + (2u << 20) + i * q + (i >= 2 ? 4096 : 0), q});
  }
  const auto done = client->ReadBatch({{4096, adjacent}, {8192, pairs}});
  ASSERT_TRUE(done[0].ok()) << done[0].ToString();
  ASSERT_TRUE(done[1].ok()) << done[1].ToString();
  EXPECT_EQ(std::memcmp(buffer.data(), segment_->base() + 4096, 4 * q), 0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(std::memcmp(pairs[i].ptr, segment_->base() + 8192 + i * q, q), 0) << i;
  }
}

// ---- A bare UCX peer: what UcxSegmentClient never sends -----------------------------------------

class RawPeer {
 public:
  static std::unique_ptr<RawPeer> Connect(const std::string& address) {
    auto worker = UcxWorker::Create(UcxTransportOptions{}, "raw peer");
    if (!worker.ok()) return nullptr;
    auto peer = std::unique_ptr<RawPeer>(new RawPeer(std::move(*worker)));
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                         UCP_AM_HANDLER_PARAM_FIELD_ARG;
    handler.id = kUcxReplyAmId;
    handler.cb = &RawPeer::OnReply;
    handler.arg = peer.get();
    if (ucp_worker_set_am_recv_handler(peer->worker_->get(), &handler) != UCS_OK) return nullptr;
    Result<HostPort> host_port = ParseHostPort(address, false);
    Result<SocketAddress> remote =
        ResolveHost(host_port->host, host_port->port, false, ErrorCode::TRANSFER_FAIL);
    auto on_error = [](void* arg, ucp_ep_h, ucs_status_t) {
      static_cast<RawPeer*>(arg)->failed_ = true;
    };
    if (ConnectEndpoint(*peer->worker_, *remote, on_error, peer.get(), &peer->ep_) != UCS_OK) {
      return nullptr;
    }
    return peer;
  }
  ~RawPeer() {
    if (ep_ != nullptr) {
      ucp_request_param_t param{};
      param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      param.flags = UCP_EP_CLOSE_FLAG_FORCE;
      WaitRequest(*worker_, ucp_ep_close_nbx(ep_, &param), 1000);
    }
  }

  // Sends one request message (any header bytes, any data) and waits until UCX is done with it.
  ucs_status_t Send(const void* header, size_t header_length, const void* data, size_t length,
                    uint32_t flags = UCP_AM_SEND_FLAG_REPLY) {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = flags;
    return WaitRequest(
        *worker_,
        ucp_am_send_nbx(ep_, kUcxRequestAmId, header, header_length, data, length, &param), 5000);
  }
  ucs_status_t Send(const UcxRequest& request, const void* data = nullptr, size_t length = 0) {
    const UcxHeader header = EncodeUcxRequest(request);
    return Send(header.data(), header.size(), data, length);
  }
  ucs_status_t Hello() {
    const std::string name = kUcxSegmentName;
    return Send(UcxRequest{kUcxProtocolVersion, UcxOp::kHello, 1, 0, name.size()}, name.data(),
                name.size());
  }

  // The next reply, if one comes within `timeout`.
  std::optional<UcxReply> NextReply(Millis timeout = Millis(3000)) {
    const auto deadline = SteadyClock::now() + timeout;
    while (replies_.empty() && !failed_ && SteadyClock::now() < deadline) {
      worker_->ProgressOrWait(0, 10);
    }
    if (replies_.empty()) return std::nullopt;
    UcxReply reply = replies_.front();
    replies_.erase(replies_.begin());
    return reply;
  }
  // Whether the server closed the endpoint within `timeout`.
  bool ClosedWithin(Millis timeout) {
    const auto deadline = SteadyClock::now() + timeout;
    while (!failed_ && SteadyClock::now() < deadline) worker_->ProgressOrWait(0, 10);
    return failed_;
  }

 private:
  explicit RawPeer(std::unique_ptr<UcxWorker> worker) : worker_(std::move(worker)) {}
  static ucs_status_t OnReply(void* arg, const void* header, size_t header_length, void*, size_t,
                              const ucp_am_recv_param_t*) {
    Result<UcxReply> reply = DecodeUcxReply(header, header_length);
    if (reply.ok()) static_cast<RawPeer*>(arg)->replies_.push_back(*reply);
    return UCS_OK;  // drops a rendezvous
  }

  std::unique_ptr<UcxWorker> worker_;
  ucp_ep_h ep_ = nullptr;
  bool failed_ = false;
  std::vector<UcxReply> replies_;
};

TEST_F(UcxTransportTest, TheServerChecksBoundsItself) {
  auto peer = RawPeer::Connect(server_->address());
  ASSERT_NE(peer, nullptr);
  ASSERT_EQ(peer->Hello(), UCS_OK);
  std::optional<UcxReply> hello = peer->NextReply();
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->status, 0);
  EXPECT_EQ(hello->value, segment_->size());

  const uint64_t size = segment_->size();
  const std::vector<std::pair<uint64_t, uint64_t>> bad = {
      {size, 1}, {size - 1, 2}, {size + 4096, 0}, {~uint64_t{0}, 2}, {1, ~uint64_t{0}}};
  uint64_t id = 10;
  for (const auto& [offset, length] : bad) {
    ASSERT_EQ(peer->Send(UcxRequest{kUcxProtocolVersion, UcxOp::kRead, ++id, offset, length}),
              UCS_OK);
    std::optional<UcxReply> reply = peer->NextReply();
    ASSERT_TRUE(reply.has_value()) << offset << "+" << length;
    EXPECT_EQ(reply->id, id);
    EXPECT_EQ(reply->status, ToInt(ErrorCode::INVALID_PARAMS)) << offset << "+" << length;
  }
  // A write past the end, with enough data for a rendezvous: refused, nothing written.
  std::vector<uint8_t> data(1 << 20, 0xAB);
  ASSERT_EQ(
      peer->Send(UcxRequest{kUcxProtocolVersion, UcxOp::kWrite, ++id, size - 100, data.size()},
                 data.data(), data.size()),
      UCS_OK);
  std::optional<UcxReply> reply = peer->NextReply();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, ToInt(ErrorCode::INVALID_PARAMS));
  EXPECT_EQ(segment_->base()[size - 100], PatternByte(size - 100, 7));
  EXPECT_EQ(segment_->base()[size - 1], PatternByte(size - 1, 7));
  // A good read still works on the same endpoint.
  ASSERT_EQ(peer->Send(UcxRequest{kUcxProtocolVersion, UcxOp::kRead, ++id, 0, 64}), UCS_OK);
  reply = peer->NextReply();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 0);
  EXPECT_EQ(reply->value, 64u);
}

TEST_F(UcxTransportTest, MalformedMessagesCloseThatEndpointOnly) {
  auto good = Connect();
  ASSERT_NE(good, nullptr);
  const UcxHeader valid_read = EncodeUcxRequest({kUcxProtocolVersion, UcxOp::kRead, 5, 0, 16});
  UcxHeader bad_magic = valid_read;
  bad_magic[1] = '?';
  const std::vector<uint8_t> short_header(valid_read.begin(), valid_read.begin() + 5);
  std::vector<uint8_t> data(200 << 10, 1);

  struct Case {
    const char* what;
    bool hello_first;
    std::function<ucs_status_t(RawPeer&)> send;
  };
  const std::vector<Case> cases = {
      {"wrong magic", true,
       [&](RawPeer& p) { return p.Send(bad_magic.data(), bad_magic.size(), nullptr, 0); }},
      {"5-byte header", true,
       [&](RawPeer& p) { return p.Send(short_header.data(), short_header.size(), nullptr, 0); }},
      {"no header", true, [&](RawPeer& p) { return p.Send(nullptr, 0, data.data(), 10); }},
      {"read before hello", false,
       [&](RawPeer& p) { return p.Send(valid_read.data(), valid_read.size(), nullptr, 0); }},
      {"read carrying data", true,
       [&](RawPeer& p) { return p.Send(valid_read.data(), valid_read.size(), data.data(), 8); }},
      {"write with less data than announced", true,
       [&](RawPeer& p) {
         return p.Send(UcxRequest{kUcxProtocolVersion, UcxOp::kWrite, 6, 0, data.size() + 1},
                       data.data(), data.size());
       }},
      {"hello with an empty name", false,
       [&](RawPeer& p) {
         return p.Send(UcxRequest{kUcxProtocolVersion, UcxOp::kHello, 1, 0, 0}, nullptr, 0);
       }},
      {"second hello", true, [&](RawPeer& p) { return p.Hello(); }},
      {"stage with a truncated descriptor", true,
       [&](RawPeer& p) {
         const auto d = EncodeUcxStageDescriptor({0, 1, 0, 4096, "key"});
         return p.Send(UcxRequest{kUcxProtocolVersion, UcxOp::kStage, 7, 0, 4096}, d.data(),
                       d.size() - 1);
       }},
      {"stage before hello", false,
       [&](RawPeer& p) {
         const auto d = EncodeUcxStageDescriptor({0, 1, 0, 4096, "key"});
         return p.Send(UcxRequest{kUcxProtocolVersion, UcxOp::kStage, 7, 0, 4096}, d.data(),
                       d.size());
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto peer = RawPeer::Connect(server_->address());
    ASSERT_NE(peer, nullptr);
    if (c.hello_first) {
      ASSERT_EQ(peer->Hello(), UCS_OK);
      ASSERT_TRUE(peer->NextReply().has_value());
    }
    (void)c.send(*peer);
    EXPECT_TRUE(peer->ClosedWithin(Millis(3000))) << "the server kept the endpoint open";
    // The well-behaved client is unaffected.
    std::vector<uint8_t> buffer(4096);
    ASSERT_TRUE(good->ReadBatch({{100, {{buffer.data(), buffer.size()}}}})[0].ok());
    EXPECT_EQ(std::memcmp(buffer.data(), segment_->base() + 100, buffer.size()), 0);
  }
  EXPECT_TRUE(WaitUntil([&] { return server_->open_endpoints() == 1; }, Millis(3000)));
  EXPECT_EQ(segment_->base()[0], PatternByte(0, 7)) << "a malformed write touched the segment";
}

TEST_F(UcxTransportTest, AServerWithoutATierRefusesAStageAndKeepsTheEndpoint) {
  auto peer = RawPeer::Connect(server_->address());
  ASSERT_NE(peer, nullptr);
  ASSERT_EQ(peer->Hello(), UCS_OK);
  std::optional<UcxReply> hello = peer->NextReply();
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->aux, 0u) << "no staging capacity without a tier";
  const auto d = EncodeUcxStageDescriptor({0, 1, 0, 4096, "key"});
  ASSERT_EQ(
      peer->Send(UcxRequest{kUcxProtocolVersion, UcxOp::kStage, 9, 0, 4096}, d.data(), d.size()),
      UCS_OK);
  std::optional<UcxReply> reply = peer->NextReply();
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->id, 9u);
  EXPECT_EQ(reply->status, ToInt(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE));
  EXPECT_FALSE(peer->ClosedWithin(Millis(200)));
}

TEST(UcxProtocolTest, StageDescriptorRoundTripAndGarbage) {
  const UcxStageDescriptor d{7, 0x1122334455667788ull, 8192, 3 << 20, "layer/3"};
  const auto bytes = EncodeUcxStageDescriptor(d);
  ASSERT_EQ(bytes.size(), kUcxStageDescriptorHeader + d.key.size());
  auto back = DecodeUcxStageDescriptor(bytes.data(), bytes.size());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->region, d.region);
  EXPECT_EQ(back->generation, d.generation);
  EXPECT_EQ(back->record_offset, d.record_offset);
  EXPECT_EQ(back->object_size, d.object_size);
  EXPECT_EQ(back->key, d.key);
  for (size_t size = 0; size < bytes.size(); ++size) {
    EXPECT_FALSE(DecodeUcxStageDescriptor(bytes.data(), size).ok()) << size;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(DecodeUcxStageDescriptor(longer.data(), longer.size()).ok());
  std::vector<uint8_t> no_key = EncodeUcxStageDescriptor({0, 0, 0, 1, "k"});
  const uint32_t zero = 0;
  std::memcpy(no_key.data() + 4, &zero, sizeof(zero));
  EXPECT_TRUE(Refused(DecodeUcxStageDescriptor(no_key.data(), no_key.size()).status(),
                      ErrorCode::INVALID_PARAMS, {"key length 0"}));
}

TEST_F(UcxTransportTest, ASilentPeerIsClosedAfterTheHandshakeTimeout) {
  server_->Stop();
  UcxTransportOptions options;
  options.io_timeout = Millis(300);
  auto server = UcxSegmentServer::Start(segment_, "127.0.0.1", 0, options);
  ASSERT_TRUE(server.ok()) << server.status().ToString();
  const auto start = SteadyClock::now();
  auto peer = RawPeer::Connect((*server)->address());
  ASSERT_NE(peer, nullptr);
  EXPECT_TRUE(peer->ClosedWithin(Millis(3000)));  // connects (progressing), then is closed
  EXPECT_GE(SteadyClock::now() - start, Millis(250));
  EXPECT_TRUE(WaitUntil([&] { return (*server)->open_endpoints() == 0; }));
  (*server)->Stop();
}

}  // namespace
}  // namespace tierkv::transport
