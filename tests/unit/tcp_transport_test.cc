// tierkv's TCP data transport (src/transport/tcp_*): the frame codec, TcpSegmentServer and
// TcpSegmentClient on 127.0.0.1 — byte-exact reads, writes and staged loads for many sizes and
// piece layouts, bounds and refusals, failures, and hostile peers (random bytes, truncated and
// oversized frames, requests before the hello, silent connections), after which the server
// still serves.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "device_test_util.h"
#include "memory/memory_segment.h"
#include "net_test_util.h"
#include "pattern_test_util.h"
#include "size_units.h"
#include "ssd/ssd_tier.h"
#include "store/tier_stager.h"
#include "transport/tcp_protocol.h"
#include "transport/tcp_segment_client.h"
#include "transport/tcp_segment_server.h"
#include "transport/tls_stream.h"
#include "transport/ucx_worker.h"

namespace tierkv::transport {
namespace {

using namespace std::chrono_literals;
using test_util::Pattern;
constexpr auto kTcpTimeout = std::chrono::milliseconds(5000);
constexpr char kName[] = "tcp-seg";

// A raw TCP connection to 127.0.0.1:port (-1 on failure).
int RawConnect(int port) { return test_util::ConnectLoopback(port); }

void SendAll(int fd, const void* data, size_t size) { (void)send(fd, data, size, MSG_NOSIGNAL); }

// Whether the server closed `fd` within `timeout` (reads and drops whatever it sent first).
bool ClosedByServer(int fd, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return true;
  }
  return false;
}

// Reads one reply header from `fd` (within 2 s); nullopt if none.
std::optional<TcpReply> ReadReply(int fd) {
  uint8_t header[kTcpHeaderSize];
  size_t have = 0;
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (have < sizeof(header) && std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = recv(fd, header + have, sizeof(header) - have, 0);
    if (n <= 0) return std::nullopt;
    have += static_cast<size_t>(n);
  }
  if (have < sizeof(header)) return std::nullopt;
  Result<TcpReply> reply = DecodeTcpReply(header);
  if (!reply.ok()) return std::nullopt;
  return *reply;
}

TcpHeader Request(UcxOp op, uint64_t id, uint64_t offset, uint64_t length, uint32_t data) {
  TcpRequest r;
  r.op = op;
  r.id = id;
  r.offset = offset;
  r.length = length;
  r.data_length = data;
  return EncodeTcpRequest(r);
}

// Reads the server's challenge (its header and nonce) from `fd`: the nonce, or nullopt.
std::optional<TokenDigest> ReadChallenge(int fd, bool* required = nullptr) {
  std::optional<TcpReply> challenge = ReadReply(fd);
  if (!challenge.has_value() || challenge->op != UcxOp::kChallenge) return std::nullopt;
  if (required != nullptr) *required = challenge->aux != 0;
  TokenDigest nonce{};
  size_t have = 0;
  while (have < nonce.size()) {
    const ssize_t n = recv(fd, nonce.data() + have, nonce.size() - have, 0);
    if (n <= 0) return std::nullopt;
    have += static_cast<size_t>(n);
  }
  return nonce;
}

// A raw hello for `name`, proving `secret` ("" = a zero proof) over the challenge; the reply.
std::optional<TcpReply> RawHello(int fd, const std::string& name, const std::string& secret = "") {
  std::optional<TokenDigest> nonce = ReadChallenge(fd);
  if (!nonce.has_value()) return std::nullopt;
  const TokenDigest proof =
      secret.empty() ? TokenDigest{} : TokenMac(secret, {kTcpHelloLabel, AsView(*nonce), name});
  const TcpHeader hello =
      Request(UcxOp::kHello, 1, 0, 0, static_cast<uint32_t>(kTcpProofBytes + name.size()));
  SendAll(fd, hello.data(), hello.size());
  SendAll(fd, proof.data(), proof.size());
  SendAll(fd, name.data(), name.size());
  return ReadReply(fd);
}

TEST(TcpProtocolTest, RoundTripsAndRefusesWhatTheOpDoesNotAllow) {
  const TcpHeader h = Request(UcxOp::kWrite, 7, 4096, 100, 100);
  Result<TcpRequest> r = DecodeTcpRequest(h.data());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->op, UcxOp::kWrite);
  EXPECT_EQ(r->id, 7u);
  EXPECT_EQ(r->offset, 4096u);
  EXPECT_EQ(r->length, 100u);
  auto bad = [](const TcpHeader& header) { return !DecodeTcpRequest(header.data()).ok(); };
  EXPECT_TRUE(bad(Request(UcxOp::kWrite, 1, 0, 100, 99)));                    // data != length
  EXPECT_TRUE(bad(Request(UcxOp::kRead, 1, 0, 100, 1)));                      // a read with data
  EXPECT_TRUE(bad(Request(UcxOp::kRead, 1, 0, 0, 0)));                        // nothing asked
  EXPECT_TRUE(bad(Request(UcxOp::kRead, 1, 0, kTcpMaxRequestBytes + 1, 0)));  // oversized
  EXPECT_TRUE(bad(Request(UcxOp::kHello, 1, 0, 0, 0)));                       // no proof
  EXPECT_TRUE(bad(Request(UcxOp::kHello, 1, 0, 0, kTcpProofBytes)));          // no name
  EXPECT_TRUE(bad(Request(UcxOp::kHello, 1, 0, 0, kTcpProofBytes + 4097)));   // name too long
  EXPECT_TRUE(bad(Request(UcxOp::kChallenge, 0, 0, 0, kTcpProofBytes)));      // servers' only
  EXPECT_TRUE(bad(Request(UcxOp::kStage, 1, 0, 10, 32)));  // descriptor without key
  EXPECT_TRUE(bad(Request(UcxOp::kStage, 1, 0, 10, kTcpMaxDescriptorBytes + 1)));
  TcpHeader unknown = Request(UcxOp::kRead, 1, 0, 10, 0);
  unknown[6] = 9;
  EXPECT_TRUE(bad(unknown));
  TcpHeader magic = Request(UcxOp::kRead, 1, 0, 10, 0);
  magic[0] = 'X';
  EXPECT_TRUE(bad(magic));
  TcpHeader reserved = Request(UcxOp::kRead, 1, 0, 10, 0);
  reserved[39] = 1;
  EXPECT_TRUE(bad(reserved));
  // Random headers never decode into something out of the allowed ranges.
  std::mt19937 rng(1);
  for (int i = 0; i < 100000; ++i) {
    TcpHeader random;
    for (auto& b : random) b = static_cast<uint8_t>(rng());
    if (i % 2 == 0) {
      std::memcpy(random.data(), kTcpMagic, 4);
      random[4] = kTcpProtocolVersion;
      random[5] = 0;
    }
    Result<TcpRequest> got = DecodeTcpRequest(random.data());
    if (got.ok()) {
      EXPECT_LE(got->length, kTcpMaxRequestBytes);
    }
  }
}

class TcpTransportTest : public ::testing::Test {
 protected:
  void StartServer(uint64_t segment_bytes = 4 * kMiB, std::shared_ptr<SsdTier> tier = nullptr,
                   UcxTransportOptions options = {}) {
    auto segment = MemorySegment::Create(kName, segment_bytes, PagePolicy::kSmallPages);
    ASSERT_TRUE(segment.ok()) << segment.status().ToString();
    segment_ = std::move(segment).value();
    if (tier != nullptr) {
      auto stager = TierStager::Start(std::move(tier), "tcp-test");
      ASSERT_TRUE(stager.ok()) << stager.status().ToString();
      stager_ = std::move(stager).value();
    }
    auto server = TcpSegmentServer::Start(segment_, "127.0.0.1", 0, options, stager_);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
    Result<HostPort> hp = ParseHostPort(server_->address(), false);
    ASSERT_TRUE(hp.ok());
    port_ = hp->port;
  }
  std::unique_ptr<TcpSegmentClient> Connect() {
    auto c = TcpSegmentClient::Connect(server_->address(), kName, kTcpTimeout);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  // A write, then a read of the same bytes through a fresh client: the server still serves.
  void ExpectServing() {
    auto client = Connect();
    ASSERT_NE(client, nullptr);
    std::string in = Pattern(300000, 42);
    std::vector<Status> w = client->WriteBatch({{1000, {ConstPiece{in.data(), in.size()}}}});
    ASSERT_TRUE(w[0].ok()) << w[0].ToString();
    std::string out(in.size(), '\0');
    std::vector<Status> r = client->ReadBatch({{1000, {MutPiece{out.data(), out.size()}}}});
    ASSERT_TRUE(r[0].ok()) << r[0].ToString();
    EXPECT_EQ(out, in);
  }

  std::shared_ptr<MemorySegment> segment_;
  std::shared_ptr<TierStager> stager_;  // outlives the server
  std::unique_ptr<TcpSegmentServer> server_;
  int port_ = 0;
};

TEST_F(TcpTransportTest, ReadsAndWritesAreByteExactForManyLayouts) {
  StartServer(40 * kMiB);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->size(), 40 * kMiB);
  EXPECT_EQ(client->staging_capacity(), 0u);
  EXPECT_TRUE(client->alive());
  // Sizes around page and request boundaries (16 MiB), in 1..5 pieces of uneven sizes.
  const std::vector<size_t> sizes = {1, 4095, 4096, 65537, 2 * kMiB, 16 * kMiB + 3, 20 * kMiB};
  uint64_t at = 0;
  std::vector<std::string> values;
  values.reserve(sizes.size());  // the ops point into the strings (small ones are inline)
  std::vector<NetworkSegmentClient::WriteOp> writes;
  for (size_t i = 0; i < sizes.size(); ++i) {
    values.push_back(Pattern(sizes[i], static_cast<uint32_t>(i)));
    NetworkSegmentClient::WriteOp op{at, {}};
    const size_t pieces = 1 + i % 5;
    size_t done = 0;
    for (size_t k = 0; k < pieces; ++k) {
      const size_t len = k + 1 == pieces ? sizes[i] - done : sizes[i] / (pieces + 1);
      op.src.push_back(ConstPiece{values[i].data() + done, len});
      done += len;
    }
    writes.push_back(op);
    at += sizes[i] + 100;
    if (at > 18 * kMiB && i + 1 < sizes.size()) at = 0;  // keep within the segment
  }
  // Two batches (the large ones overlap the small ones' ranges otherwise).
  for (size_t i = 0; i < writes.size(); ++i) {
    ASSERT_TRUE(client->WriteBatch({writes[i]})[0].ok()) << i;
    std::string back(sizes[i], '\0');
    std::vector<MutPiece> dst = {
        MutPiece{back.data(), back.size() / 3},
        MutPiece{back.data() + back.size() / 3, back.size() - back.size() / 3}};
    std::vector<Status> r = client->ReadBatch({{writes[i].offset, dst}});
    ASSERT_TRUE(r[0].ok()) << r[0].ToString();
    EXPECT_EQ(back, values[i]) << "size " << sizes[i];
  }
  // Many small ops in one batch (more than the in-flight window).
  std::vector<std::string> smalls;
  smalls.reserve(500);
  std::vector<NetworkSegmentClient::WriteOp> batch;
  for (int i = 0; i < 500; ++i) {
    smalls.push_back(Pattern(1000 + i, 1000 + i));
    batch.push_back(
        {static_cast<uint64_t>(i) * 4096, {ConstPiece{smalls[i].data(), smalls[i].size()}}});
  }
  for (const Status& s : client->WriteBatch(batch)) ASSERT_TRUE(s.ok()) << s.ToString();
  std::vector<std::string> backs(500);
  std::vector<NetworkSegmentClient::ReadOp> reads;
  for (int i = 0; i < 500; ++i) {
    backs[i].resize(smalls[i].size());
    reads.push_back(
        {static_cast<uint64_t>(i) * 4096, {MutPiece{backs[i].data(), backs[i].size()}}});
  }
  for (const Status& s : client->ReadBatch(reads)) ASSERT_TRUE(s.ok()) << s.ToString();
  for (int i = 0; i < 500; ++i) ASSERT_EQ(backs[i], smalls[i]) << i;
  EXPECT_GT(server_->read_bytes(), 0u);
  EXPECT_GT(server_->written_bytes(), 0u);
  EXPECT_EQ(server_->rejected(), 0u);
}

TEST_F(TcpTransportTest, RefusalsAndFailures) {
  StartServer();
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  std::string buf(100, 'x');
  std::vector<size_t> reported;  // on_done hears of the op that succeeds, only
  std::vector<Status> r = client->ReadBatch({{4 * kMiB - 50, {MutPiece{buf.data(), buf.size()}}},
                                             {0, {MutPiece{nullptr, 10}}},
                                             {0, {MutPiece{buf.data(), buf.size()}}}},
                                            {}, [&](size_t op) { reported.push_back(op); });
  EXPECT_EQ(r[0].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(r[1].code(), ErrorCode::INVALID_PARAMS);
  EXPECT_TRUE(r[2].ok()) << "one bad op never fails its neighbours";
  EXPECT_EQ(reported, std::vector<size_t>{2});
  // Another segment's name; nobody listening; a bad address.
  EXPECT_EQ(TcpSegmentClient::Connect(server_->address(), "other", kTcpTimeout).code(),
            ErrorCode::SEGMENT_NOT_FOUND);
  EXPECT_EQ(TcpSegmentClient::Connect("127.0.0.1:1", kName, kTcpTimeout).code(),
            ErrorCode::TRANSFER_FAIL);
  EXPECT_EQ(TcpSegmentClient::Connect("nohost", kName, kTcpTimeout).code(),
            ErrorCode::INVALID_PARAMS);
  // Without a tier, staged loads are refused.
  std::vector<Status> s =
      client->StageBatch({{"k", DiskLocation{0, 1, 4096, 100}, {MutPiece{buf.data(), 100}}}}, 0.9);
  EXPECT_EQ(s[0].code(), ErrorCode::UNAVAILABLE_IN_CURRENT_MODE);
  // The server goes: alive() turns false, calls fail with TRANSFER_FAIL.
  server_->Stop();
  const auto deadline = std::chrono::steady_clock::now() + 2s;
  while (client->alive() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_FALSE(client->alive());
  r = client->ReadBatch({{0, {MutPiece{buf.data(), buf.size()}}}});
  EXPECT_EQ(r[0].code(), ErrorCode::TRANSFER_FAIL);
}

TEST_F(TcpTransportTest, StagedLoadsAreByteExact) {
  test_util::ScratchDir scratch;
  SsdTierOptions o;
  o.paths = {scratch.File("tcp.tier")};
  o.region_size = 8 * kMiB;
  o.capacity_per_path = 8 * o.region_size;
  o.allow_buffered_fallback = scratch.IsTmpfs();
  o.want_huge_pages = false;
  o.staging.capacity = 2 * kMiB;
  o.staging.want_huge_pages = false;
  o.staging.wait = 5000ms;
  auto opened = SsdTier::Open(
      o, [](uint32_t, uint64_t, std::vector<std::string>) {}, nullptr);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::shared_ptr<SsdTier> tier(std::move(opened).value());
  StartServer(kMiB, tier);
  auto client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_EQ(client->staging_capacity(), 2 * kMiB);
  const std::vector<size_t> sizes = {1, 4096, 300 * 1024, 2 * kMiB, 5 * kMiB + 333};
  std::vector<std::string> values;
  std::vector<DiskLocation> locations;
  for (size_t i = 0; i < sizes.size(); ++i) {
    values.push_back(Pattern(sizes[i], 77 + static_cast<uint32_t>(i)));
    auto loc =
        tier->Append("key" + std::to_string(i), {ConstPiece{values[i].data(), values[i].size()}});
    ASSERT_TRUE(loc.ok()) << loc.status().ToString();
    locations.push_back(*loc);
  }
  ASSERT_TRUE(tier->Flush().ok());
  std::vector<std::string> backs(sizes.size());
  std::vector<NetworkSegmentClient::StageOp> ops;
  for (size_t i = 0; i < sizes.size(); ++i) {
    backs[i].resize(sizes[i]);
    ops.push_back({"key" + std::to_string(i), locations[i], {MutPiece{backs[i].data(), sizes[i]}}});
  }
  // on_done: each op once, when all its bytes are in (the 5 MiB one comes in several ranges
  // through the 2 MiB staging buffer).
  std::vector<int> reported(sizes.size(), 0);
  std::vector<Status> got = client->StageBatch(ops, 0.9, [&](size_t op) {
    ++reported[op];
    EXPECT_EQ(backs[op], values[op]) << "reported before all its bytes were in: size " << sizes[op];
  });
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(got[i].ok()) << i << ": " << got[i].ToString();
    EXPECT_EQ(backs[i], values[i]) << "size " << sizes[i];
    EXPECT_EQ(reported[i], 1) << "size " << sizes[i];
  }
  // A key that is not there: the server's per-range code, the others unharmed.
  std::string miss(100, '\0');
  got = client->StageBatch({{"nope", locations[0], {MutPiece{miss.data(), 1}}}}, 0.9,
                           [](size_t) { ADD_FAILURE() << "a failed op was reported done"; });
  EXPECT_FALSE(got[0].ok());
  EXPECT_TRUE(client->alive());
  server_->Stop();
  server_.reset();
}

// Regression (issue 12): hostile bytes on the data port. Random bytes, frames with a good magic
// but bad fields, truncated and oversized frames, requests before the hello, and connections
// that say nothing: each is closed (no crash), and the server serves a real client afterwards.
TEST_F(TcpTransportTest, HostilePeersAreDisconnectedAndTheServerKeepsServing) {
  UcxTransportOptions options;
  options.io_timeout = 300ms;
  StartServer(4 * kMiB, nullptr, options);
  std::mt19937 rng(12);
  auto random_bytes = [&rng](size_t n) {
    std::string s(n, '\0');
    for (auto& c : s) c = static_cast<char>(rng());
    return s;
  };
  // Random bytes, of many lengths.
  for (size_t n : {1, 15, 16, 39, 40, 41, 100, 4096, 100000}) {
    const int fd = RawConnect(port_);
    ASSERT_GE(fd, 0);
    const std::string junk = n == 16 ? std::string(16, '\xff') : random_bytes(n);
    SendAll(fd, junk.data(), junk.size());
    EXPECT_TRUE(ClosedByServer(fd, 2s)) << n << " random bytes";
    close(fd);
  }
  // A good magic and version, the rest random (a fuzzer that knows the protocol).
  for (int i = 0; i < 300; ++i) {
    const int fd = RawConnect(port_);
    ASSERT_GE(fd, 0);
    std::string frame = random_bytes(kTcpHeaderSize + static_cast<size_t>(rng() % 200));
    std::memcpy(frame.data(), kTcpMagic, 4);
    frame[4] = kTcpProtocolVersion;
    frame[5] = 0;
    frame[6] = static_cast<char>(1 + rng() % 5);
    frame[7] = 0;
    SendAll(fd, frame.data(), frame.size());
    close(fd);  // whatever the server made of it, the next connection must be served
  }
  // Requests before the hello; an oversized read after it; a truncated hello.
  {
    const int fd = RawConnect(port_);
    const TcpHeader read = Request(UcxOp::kRead, 1, 0, 100, 0);
    SendAll(fd, read.data(), read.size());
    EXPECT_TRUE(ClosedByServer(fd, 2s)) << "a read before the hello";
    close(fd);
  }
  {
    const int fd = RawConnect(port_);
    std::optional<TcpReply> reply = RawHello(fd, kName);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, 0);
    EXPECT_EQ(reply->value, 4 * kMiB);
    // Out of the segment: refused, the connection kept.
    const TcpHeader far = Request(UcxOp::kRead, 2, 4 * kMiB - 10, 100, 0);
    SendAll(fd, far.data(), far.size());
    reply = ReadReply(fd);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, ToInt(ErrorCode::INVALID_PARAMS));
    // A write past the end: its bytes are read and dropped, then refused.
    const TcpHeader past = Request(UcxOp::kWrite, 3, 4 * kMiB, 1000, 1000);
    SendAll(fd, past.data(), past.size());
    const std::string data(1000, 'w');
    SendAll(fd, data.data(), data.size());
    reply = ReadReply(fd);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, ToInt(ErrorCode::INVALID_PARAMS));
    // Oversized: the frame is refused and the connection closed.
    const TcpHeader huge = Request(UcxOp::kRead, 4, 0, uint64_t{1} << 40, 0);
    SendAll(fd, huge.data(), huge.size());
    EXPECT_TRUE(ClosedByServer(fd, 2s));
    close(fd);
  }
  {
    const int fd = RawConnect(port_);
    const TcpHeader hello = Request(UcxOp::kHello, 1, 0, 0, 100);
    SendAll(fd, hello.data(), hello.size());
    SendAll(fd, "short", 5);
    close(fd);  // truncated: the server sees the hang-up mid-frame
  }
  // Silent connections are closed after io_timeout; many at once.
  std::vector<int> silent;
  for (int i = 0; i < 200; ++i) silent.push_back(RawConnect(port_));
  ExpectServing();  // served while 200 silent peers wait
  for (int fd : silent) {
    EXPECT_TRUE(ClosedByServer(fd, 3s));
    close(fd);
  }
  EXPECT_GT(server_->rejected(), 200u);
  ExpectServing();
}

// The cluster token on the data port: a requester proves it over the server's challenge and
// checks the server's proof back; without it, with another cluster's, or against a server that
// does not hold it, the hello is refused (UNAUTHENTICATED) before any byte of the segment moves.
TEST_F(TcpTransportTest, TheClusterTokenIsProvedBothWaysInTheHandshake) {
  const std::string secret = "0123456789abcdef-cluster-a";
  UcxTransportOptions server_options;
  server_options.tokens = TokenSet::FromSecrets({secret});
  StartServer(4 * kMiB, nullptr, server_options);
  auto connect = [&](std::shared_ptr<const TokenSet> tokens) {
    UcxTransportOptions options;
    options.tokens = std::move(tokens);
    return TcpSegmentClient::Connect(server_->address(), kName, kTcpTimeout, options);
  };
  {
    auto good = connect(TokenSet::FromSecrets({secret}));
    ASSERT_TRUE(good.ok()) << good.status().ToString();
    std::string in = Pattern(100000, 3);
    ASSERT_TRUE((*good)->WriteBatch({{0, {ConstPiece{in.data(), in.size()}}}})[0].ok());
    std::string out(in.size(), '\0');
    ASSERT_TRUE((*good)->ReadBatch({{0, {MutPiece{out.data(), out.size()}}}})[0].ok());
    EXPECT_EQ(out, in);
  }
  auto none = connect(nullptr);
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.code(), ErrorCode::UNAUTHENTICATED) << none.status().ToString();
  EXPECT_NE(none.status().message().find("requires the cluster token"), std::string::npos);
  auto wrong = connect(TokenSet::FromSecrets({"another-cluster-token-xyz"}));
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.code(), ErrorCode::UNAUTHENTICATED) << wrong.status().ToString();
  EXPECT_EQ(wrong.status().message().find(secret), std::string::npos);
  EXPECT_EQ(server_->unauthenticated(), 1u);  // the client without a token never sent a hello

  // A raw peer with a zero proof: refused, then closed; nothing of the segment is named.
  const int fd = RawConnect(port_);
  bool required = false;
  ASSERT_TRUE(ReadChallenge(fd, &required).has_value());
  EXPECT_TRUE(required);
  close(fd);
  const int fd2 = RawConnect(port_);
  std::optional<TcpReply> reply = RawHello(fd2, kName);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, ToInt(ErrorCode::UNAUTHENTICATED));
  EXPECT_EQ(reply->value, 0u);
  EXPECT_TRUE(ClosedByServer(fd2, 2s));
  close(fd2);
  // A proof replayed from another connection (another nonce) is refused too.
  const int fd3 = RawConnect(port_);
  std::optional<TokenDigest> nonce = ReadChallenge(fd3);
  ASSERT_TRUE(nonce.has_value());
  close(fd3);
  const int fd4 = RawConnect(port_);
  ASSERT_TRUE(ReadChallenge(fd4).has_value());
  const TokenDigest stale = TokenMac(secret, {kTcpHelloLabel, AsView(*nonce), kName});
  const std::string name = kName;
  const TcpHeader hello =
      Request(UcxOp::kHello, 1, 0, 0, static_cast<uint32_t>(kTcpProofBytes + name.size()));
  SendAll(fd4, hello.data(), hello.size());
  SendAll(fd4, stale.data(), stale.size());
  SendAll(fd4, name.data(), name.size());
  reply = ReadReply(fd4);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, ToInt(ErrorCode::UNAUTHENTICATED));
  close(fd4);
  EXPECT_EQ(server_->unauthenticated(), 3u);
  // A correct raw proof is served.
  const int fd5 = RawConnect(port_);
  reply = RawHello(fd5, kName, secret);
  ASSERT_TRUE(reply.has_value());
  EXPECT_EQ(reply->status, 0);
  EXPECT_EQ(reply->data_length, kTcpProofBytes);
  close(fd5);
}

TEST_F(TcpTransportTest, ARequesterWithATokenRefusesAServerWithoutOne) {
  StartServer();  // no token: trusts whoever connects
  UcxTransportOptions options;
  options.tokens = TokenSet::FromSecrets({"0123456789abcdef-cluster-a"});
  auto c = TcpSegmentClient::Connect(server_->address(), kName, kTcpTimeout, options);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.code(), ErrorCode::UNAUTHENTICATED);
  EXPECT_NE(c.status().message().find("does not check the cluster token"), std::string::npos);
  ExpectServing();  // a requester without a token is served
}

// Rotation: a server that accepts the old and the new token serves requesters of either; once
// it holds only the new one, the old one is refused.
TEST_F(TcpTransportTest, RotationAcceptsASecondTokenUntilItIsDropped) {
  const std::string old_token = "old-token-0123456789";
  const std::string new_token = "new-token-0123456789";
  UcxTransportOptions server_options;
  server_options.tokens = TokenSet::FromSecrets({old_token, new_token});
  StartServer(4 * kMiB, nullptr, server_options);
  for (const std::string& token : {old_token, new_token}) {
    UcxTransportOptions options;
    options.tokens = TokenSet::FromSecrets({token});
    auto c = TcpSegmentClient::Connect(server_->address(), kName, kTcpTimeout, options);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
  }
  server_->Stop();
  server_options.tokens = TokenSet::FromSecrets({new_token});
  StartServer(4 * kMiB, nullptr, server_options);
  UcxTransportOptions options;
  options.tokens = TokenSet::FromSecrets({old_token});
  auto c = TcpSegmentClient::Connect(server_->address(), kName, kTcpTimeout, options);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.code(), ErrorCode::UNAUTHENTICATED);
}

// A CA and a server certificate for 127.0.0.1 (and one for another name), made with openssl.
class TcpTlsTest : public TcpTransportTest {
 protected:
  void SetUp() override {
    char dir[] = "/tmp/tierkv-tcp-tls-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    dir_ = dir;
    std::ofstream(dir_ + "/make.sh")
        << "set -e\ncd '" << dir_ << "'\nexec 2>/dev/null\n"
        << "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=ca -keyout ca.key "
           "-out ca.pem\n"
        << "for n in ip:IP:127.0.0.1 dns:DNS:elsewhere.invalid; do\n"
        << "  name=${n%%:*}; san=${n#*:}\n"
        << "  openssl req -newkey rsa:2048 -nodes -subj /CN=store -keyout $name.key "
           "-out $name.csr\n"
        << "  echo \"subjectAltName=$san\" > $name.ext\n"
        << "  openssl x509 -req -in $name.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 "
           "-extfile $name.ext -out $name.pem\n"
        << "done\n"
        << "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=other -keyout other.key "
           "-out other.pem\n";
    ASSERT_EQ(std::system(("/bin/sh '" + dir_ + "/make.sh'").c_str()), 0) << "openssl failed";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Read(const std::string& name) {
    std::ifstream in(dir_ + "/" + name);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }
  std::shared_ptr<const TlsContext> ServerContext(const std::string& name) {
    auto ctx = TlsContext::Server(Read(name + ".pem"), Read(name + ".key"));
    EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
    return ctx.ok() ? std::move(ctx).value() : nullptr;
  }
  std::shared_ptr<const TlsContext> ClientContext(const std::string& ca) {
    auto ctx = TlsContext::Client(Read(ca));
    EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
    return ctx.ok() ? std::move(ctx).value() : nullptr;
  }
  std::string dir_;
};

// Byte-exact reads and writes over TLS, with the token proved inside it; a plaintext requester,
// one that trusts another CA, and one dialling a server whose certificate names another host
// are refused before any byte of the segment moves.
TEST_F(TcpTlsTest, ReadsAndWritesOverTlsAndRefusalsOfTheWrongPeers) {
  UcxTransportOptions server_options;
  server_options.tls_server = ServerContext("ip");
  server_options.tokens = TokenSet::FromSecrets({"tls-cluster-token-0123"});
  StartServer(40 * kMiB, nullptr, server_options);
  UcxTransportOptions options;
  options.tls_client = ClientContext("ca.pem");
  options.tokens = server_options.tokens;
  auto client = TcpSegmentClient::Connect(server_->address(), kName, kTcpTimeout, options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  for (size_t size : {size_t{1}, size_t{65537}, size_t{16} * kMiB + 3}) {
    const std::string in = Pattern(size, static_cast<uint32_t>(size));
    std::vector<ConstPiece> pieces = {{in.data(), in.size() / 2},
                                      {in.data() + in.size() / 2, in.size() - in.size() / 2}};
    ASSERT_TRUE((*client)->WriteBatch({{4096, pieces}})[0].ok());
    std::string out(size, '\0');
    ASSERT_TRUE((*client)->ReadBatch({{4096, {MutPiece{out.data(), out.size()}}}})[0].ok());
    EXPECT_EQ(out, in) << size;
  }
  EXPECT_TRUE((*client)->alive());

  UcxTransportOptions plaintext;
  plaintext.tokens = server_options.tokens;
  auto plain = TcpSegmentClient::Connect(server_->address(), kName, 2000ms, plaintext);
  EXPECT_FALSE(plain.ok());
  UcxTransportOptions other_ca = options;
  other_ca.tls_client = ClientContext("other.pem");
  auto untrusted = TcpSegmentClient::Connect(server_->address(), kName, kTcpTimeout, other_ca);
  ASSERT_FALSE(untrusted.ok());
  EXPECT_NE(untrusted.status().message().find("certificate"), std::string::npos)
      << untrusted.status().message();

  server_->Stop();
  server_options.tls_server = ServerContext("dns");  // names elsewhere.invalid, not 127.0.0.1
  StartServer(4 * kMiB, nullptr, server_options);
  auto wrong_host = TcpSegmentClient::Connect(server_->address(), kName, kTcpTimeout, options);
  ASSERT_FALSE(wrong_host.ok());
  EXPECT_NE(wrong_host.status().message().find("certificate"), std::string::npos)
      << wrong_host.status().message();
  // A TLS requester against a plaintext server: refused too.
  server_->Stop();
  server_options.tls_server = nullptr;
  StartServer(4 * kMiB, nullptr, server_options);
  EXPECT_FALSE(TcpSegmentClient::Connect(server_->address(), kName, 2000ms, options).ok());
}

}  // namespace
}  // namespace tierkv::transport

// The connection budget leaves the rest of the process descriptors to spare (a flood at the
// descriptor limit starves gRPC otherwise): a quarter of the limit, at least 64.
TEST(TcpServerBudgetTest, ConnectionsLeaveDescriptorsForTheRestOfTheProcess) {
  using tierkv::transport::TcpSegmentServer;
  EXPECT_EQ(TcpSegmentServer::MaxConnections(200), 136u);
  EXPECT_EQ(TcpSegmentServer::MaxConnections(1024), 768u);
  EXPECT_EQ(TcpSegmentServer::MaxConnections(1u << 20), TcpSegmentServer::kMaxConnections);
  EXPECT_EQ(TcpSegmentServer::MaxConnections(64), 8u);  // never below 8
  EXPECT_EQ(TcpSegmentServer::MaxConnections(0), 8u);
}
