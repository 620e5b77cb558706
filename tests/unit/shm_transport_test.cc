// The same-host shared-memory transport in one process: the handshake codec, ShmSegmentServer
// and ShmSegmentMapper. Multi-process cases (a forked store, SIGKILL, another uid) are in
// tests/integration/shm_process_test.cc.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "memory/memory_segment.h"
#include "pattern_test_util.h"
#include "transport/ipc_path.h"
#include "transport/shm_protocol.h"
#include "transport/shm_segment_client.h"
#include "transport/shm_segment_server.h"
#include "transport_test_util.h"

namespace tierkv::transport {
namespace {

namespace fs = std::filesystem;
using test_util::PatternByte;
using testing::Millis;
using testing::RawConnect;
using testing::ReadUntilEof;
using testing::Refused;
using testing::SendBytes;
using testing::WaitUntil;

constexpr uint64_t kSegmentSize = uint64_t{1} << 20;
constexpr const char* kSegmentName = "store-0/dram";
constexpr Millis kTimeout{2000};

// ---- The handshake codec ----------------------------------------------------------------------

std::vector<uint8_t> Header(const char* magic, uint32_t version, uint32_t name_length) {
  std::vector<uint8_t> bytes(kShmRequestHeaderSize);
  std::memcpy(bytes.data(), magic, 8);
  std::memcpy(bytes.data() + 8, &version, 4);
  std::memcpy(bytes.data() + 12, &name_length, 4);
  return bytes;
}

TEST(ShmProtocolTest, RequestRoundTrips) {
  const std::vector<uint8_t> bytes = EncodeShmRequest("seg-a");
  ASSERT_EQ(bytes.size(), kShmRequestHeaderSize + 5);
  EXPECT_EQ(std::memcmp(bytes.data(), "TKVSHM01", 8), 0);
  Result<size_t> total = DecodeShmRequestHeader(bytes.data(), bytes.size());
  ASSERT_TRUE(total.ok()) << total.status().ToString();
  EXPECT_EQ(*total, bytes.size());
  Result<ShmRequest> request = DecodeShmRequest(bytes.data(), bytes.size());
  ASSERT_TRUE(request.ok()) << request.status().ToString();
  EXPECT_EQ(request->version, kShmProtocolVersion);
  EXPECT_EQ(request->segment_name, "seg-a");

  // The longest name allowed.
  const std::string longest(kShmMaxNameLength, 'n');
  const std::vector<uint8_t> big = EncodeShmRequest(longest);
  Result<ShmRequest> decoded = DecodeShmRequest(big.data(), big.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->segment_name, longest);
}

TEST(ShmProtocolTest, EveryTruncationIsRejected) {
  const std::vector<uint8_t> bytes = EncodeShmRequest("segment");
  for (size_t size = 0; size < bytes.size(); ++size) {
    EXPECT_TRUE(Refused(DecodeShmRequest(bytes.data(), size).status(), ErrorCode::INVALID_PARAMS,
                        {"truncated"}))
        << size;
  }
  EXPECT_TRUE(
      Refused(DecodeShmRequest(nullptr, 0).status(), ErrorCode::INVALID_PARAMS, {"truncated"}));
}

TEST(ShmProtocolTest, GarbageIsRejected) {
  std::vector<uint8_t> bytes = Header("TKVSHM02", 1, 3);
  bytes.insert(bytes.end(), {'a', 'b', 'c'});
  EXPECT_TRUE(Refused(DecodeShmRequest(bytes.data(), bytes.size()).status(),
                      ErrorCode::INVALID_PARAMS, {"magic"}));
  EXPECT_FALSE(HasShmMagic(bytes.data(), bytes.size()));

  bytes = Header("TKVSHM01", 2, 3);
  bytes.insert(bytes.end(), {'a', 'b', 'c'});
  EXPECT_TRUE(HasShmMagic(bytes.data(), bytes.size()));
  EXPECT_TRUE(Refused(DecodeShmRequest(bytes.data(), bytes.size()).status(),
                      ErrorCode::INVALID_PARAMS, {"version 2"}));

  bytes = Header("TKVSHM01", 1, 0);
  EXPECT_TRUE(Refused(DecodeShmRequest(bytes.data(), bytes.size()).status(),
                      ErrorCode::INVALID_PARAMS, {"name length 0"}));

  bytes = Header("TKVSHM01", 1, kShmMaxNameLength + 1);
  EXPECT_TRUE(Refused(DecodeShmRequestHeader(bytes.data(), bytes.size()).status(),
                      ErrorCode::INVALID_PARAMS, {"name length 4097"}));
  bytes = Header("TKVSHM01", 1, 0xffffffffu);
  EXPECT_TRUE(Refused(DecodeShmRequestHeader(bytes.data(), bytes.size()).status(),
                      ErrorCode::INVALID_PARAMS, {"name length"}));

  bytes = EncodeShmRequest("abc");
  bytes.push_back('x');
  EXPECT_TRUE(Refused(DecodeShmRequest(bytes.data(), bytes.size()).status(),
                      ErrorCode::INVALID_PARAMS, {"trailing bytes"}));
}

TEST(ShmProtocolTest, RandomBytesNeverCrashTheDecoder) {
  std::mt19937_64 rng(12345);
  std::vector<uint8_t> bytes;
  for (int round = 0; round < 20000; ++round) {
    bytes.resize(rng() % 64);
    for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
    if (round % 2 == 0 && bytes.size() >= kShmRequestHeaderSize) {
      std::memcpy(bytes.data(), kShmMagic, 8);  // get past the magic half the time
      const uint32_t version = 1;
      std::memcpy(bytes.data() + 8, &version, 4);
    }
    Result<ShmRequest> request = DecodeShmRequest(bytes.data(), bytes.size());
    if (request.ok()) {
      EXPECT_EQ(request->segment_name.size() + kShmRequestHeaderSize, bytes.size());
    }
    (void)DecodeShmReply(bytes.data(), bytes.size());
  }
}

TEST(ShmProtocolTest, ReplyRoundTripsAndRejectsGarbage) {
  ShmReply reply;
  reply.status = ToInt(ErrorCode::SEGMENT_NOT_FOUND);
  reply.segment_size = uint64_t{80} << 30;
  reply.page_size = uint64_t{2} << 20;
  const std::vector<uint8_t> bytes = EncodeShmReply(reply);
  ASSERT_EQ(bytes.size(), kShmReplySize);
  Result<ShmReply> decoded = DecodeShmReply(bytes.data(), bytes.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->version, kShmProtocolVersion);
  EXPECT_EQ(decoded->status, ToInt(ErrorCode::SEGMENT_NOT_FOUND));
  EXPECT_EQ(decoded->segment_size, reply.segment_size);
  EXPECT_EQ(decoded->page_size, reply.page_size);

  EXPECT_TRUE(Refused(DecodeShmReply(bytes.data(), bytes.size() - 1).status(),
                      ErrorCode::INVALID_PARAMS, {"31 bytes"}));
  std::vector<uint8_t> wrong = bytes;
  wrong[0] = 'X';
  EXPECT_TRUE(Refused(DecodeShmReply(wrong.data(), wrong.size()).status(),
                      ErrorCode::INVALID_PARAMS, {"magic"}));
}

// ---- Server and mapper in one process --------------------------------------------------------

class ShmTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto segment = MemorySegment::Create(kSegmentName, kSegmentSize, PagePolicy::kSmallPages);
    ASSERT_TRUE(segment.ok()) << segment.status().ToString();
    segment_ = std::move(*segment);
  }

  std::unique_ptr<ShmSegmentServer> StartServer(const std::string& socket_name = "store.sock",
                                                ShmSegmentServerOptions options = {}) {
    auto server = ShmSegmentServer::Start(socket_name, segment_, options);
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    return server.ok() ? std::move(*server) : nullptr;
  }

  testing::ScratchIpcDir scratch_;
  std::shared_ptr<MemorySegment> segment_;
};

TEST_F(ShmTransportTest, MappedBytesAreTheSegmentsBytesBothWays) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(server->path(), IpcPath("store.sock"));
  struct stat st;
  ASSERT_EQ(::lstat(server->path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  ShmSegmentMapper mapper;
  auto mapped = mapper.Map(server->path(), kSegmentName, kTimeout);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  const std::shared_ptr<MappedSegment>& seg = *mapped;
  EXPECT_EQ(seg->size(), segment_->size());
  EXPECT_EQ(seg->page_size(), segment_->page_size());
  EXPECT_EQ(seg->name(), kSegmentName);
  EXPECT_EQ(seg->socket_path(), server->path());
  EXPECT_TRUE(seg->alive());
  EXPECT_NE(seg->base(), segment_->base());  // a second mapping of the same memory

  for (uint64_t i = 0; i < seg->size(); ++i) seg->base()[i] = PatternByte(i, 7);
  for (uint64_t i = 0; i < seg->size(); ++i) ASSERT_EQ(segment_->base()[i], PatternByte(i, 7)) << i;
  for (uint64_t i = 0; i < seg->size(); i += 4096) segment_->base()[i] = PatternByte(i, 99);
  for (uint64_t i = 0; i < seg->size(); i += 4096)
    ASSERT_EQ(seg->base()[i], PatternByte(i, 99)) << i;

  EXPECT_EQ(mapper.watched_connections(), 1u);
  EXPECT_TRUE(WaitUntil([&] { return server->open_connections() == 1; }));
  // The connection stays open and the segment alive while both sides are up.
  std::this_thread::sleep_for(Millis(50));
  EXPECT_TRUE(seg->alive());
}

TEST_F(ShmTransportTest, WrongSegmentNameIsRefusedClearly) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ShmSegmentMapper mapper;
  auto mapped = mapper.Map(server->path(), "store-1/dram", kTimeout);
  EXPECT_TRUE(Refused(mapped.status(), ErrorCode::SEGMENT_NOT_FOUND,
                      {server->path(), "store-1/dram", "refused", "another segment"}));
  EXPECT_EQ(mapper.watched_connections(), 0u);
  EXPECT_TRUE(WaitUntil([&] { return server->open_connections() == 0; }));
  // The server goes on serving.
  auto good = mapper.Map(server->path(), kSegmentName, kTimeout);
  EXPECT_TRUE(good.ok()) << good.status().ToString();
}

TEST_F(ShmTransportTest, StopMarksTheSegmentDeadAndLaterMapsFail) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ShmSegmentMapper mapper;
  auto mapped = mapper.Map(server->path(), kSegmentName, kTimeout);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  std::shared_ptr<MappedSegment> seg = *mapped;
  segment_->base()[123] = 45;

  const std::string path = server->path();
  server->Stop();
  EXPECT_TRUE(WaitUntil([&] { return !seg->alive(); }, Millis(1000)));
  EXPECT_TRUE(WaitUntil([&] { return mapper.watched_connections() == 0; }));
  EXPECT_EQ(seg->base()[123], 45);  // the mapping outlives the connection
  EXPECT_FALSE(fs::exists(fs::symlink_status(path)));

  server->Stop();  // idempotent
  auto again = mapper.Map(path, kSegmentName, kTimeout);
  EXPECT_TRUE(
      Refused(again.status(), ErrorCode::TRANSFER_FAIL, {path, "connect", std::strerror(ENOENT)}));
  server.reset();  // the destructor's Stop after an explicit one
}

// alive() answers from the connection itself, not from what the watcher thread has seen so far:
// once the server has closed, no caller may still be told "alive" (the requester would copy a
// dead owner's bytes). Many mappings make the watcher's pass long enough that, were alive() only
// the watcher's flag, some would still read true right after Stop returns.
TEST_F(ShmTransportTest, AliveTurnsFalseAsSoonAsTheServerHasClosedNotWhenTheWatcherWakes) {
  for (int round = 0; round < 5; ++round) {
    auto server = StartServer();
    ASSERT_NE(server, nullptr);
    ShmSegmentMapper mapper;
    std::vector<std::shared_ptr<MappedSegment>> segments;
    for (int i = 0; i < 64; ++i) {
      auto mapped = mapper.Map(server->path(), kSegmentName, kTimeout);
      ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
      segments.push_back(*mapped);
    }
    server->Stop();  // every connection is closed when this returns
    size_t still_alive = 0;
    for (const auto& seg : segments) still_alive += seg->alive() ? 1 : 0;
    EXPECT_EQ(still_alive, 0u) << "round " << round;
    EXPECT_TRUE(WaitUntil([&] { return mapper.watched_connections() == 0; }));
  }
}

TEST_F(ShmTransportTest, DroppingASegmentClosesItsConnection) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ShmSegmentMapper mapper;
  auto first = mapper.Map(server->path(), kSegmentName, kTimeout);
  auto second = mapper.Map(server->path(), kSegmentName, kTimeout);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(mapper.watched_connections(), 2u);
  EXPECT_TRUE(WaitUntil([&] { return server->open_connections() == 2; }));
  first->reset();
  EXPECT_TRUE(WaitUntil([&] { return mapper.watched_connections() == 1; }));
  EXPECT_TRUE(WaitUntil([&] { return server->open_connections() == 1; }));
  EXPECT_TRUE((*second)->alive());
}

TEST_F(ShmTransportTest, MappingOutlivesTheMapperButIsNoLongerAlive) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  std::shared_ptr<MappedSegment> seg;
  {
    ShmSegmentMapper mapper;
    auto mapped = mapper.Map(server->path(), kSegmentName, kTimeout);
    ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
    seg = *mapped;
    EXPECT_TRUE(seg->alive());
  }
  EXPECT_FALSE(seg->alive());  // nobody watches it any more
  seg->base()[0] = 1;
  EXPECT_EQ(segment_->base()[0], 1);
  EXPECT_TRUE(WaitUntil([&] { return server->open_connections() == 0; }));
}

TEST_F(ShmTransportTest, ConcurrentMapsFromManyThreads) {
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ShmSegmentMapper mapper;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::vector<std::shared_ptr<MappedSegment>> held;
      for (int i = 0; i < 10; ++i) {
        auto mapped = mapper.Map(server->path(), kSegmentName, kTimeout);
        if (!mapped.ok() || !(*mapped)->alive()) {
          ++failures;
          continue;
        }
        held.push_back(*mapped);
        if (i % 3 == 0) held.erase(held.begin());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_TRUE(WaitUntil([&] { return mapper.watched_connections() == 0; }));
  EXPECT_TRUE(WaitUntil([&] { return server->open_connections() == 0; }));
}

// Raw peers that do not speak the protocol: each is closed, and the server keeps serving.
TEST_F(ShmTransportTest, GarbageTruncatedAndOversizedRequestsAreClosed) {
  ShmSegmentServerOptions options;
  options.handshake_timeout = Millis(300);
  auto server = StartServer("store.sock", options);
  ASSERT_NE(server, nullptr);
  const std::string& path = server->path();

  {  // Garbage: closed without a reply.
    testing::Received r;
    UniqueFd fd = RawConnect(path);
    ASSERT_TRUE(fd.valid());
    ASSERT_TRUE(SendBytes(fd.get(), std::vector<uint8_t>(64, 0xA5)));
    r = ReadUntilEof(fd.get(), Millis(2000));
    EXPECT_TRUE(r.eof);
    EXPECT_TRUE(r.bytes.empty());
    EXPECT_EQ(r.fds, 0);
  }
  {  // The magic, then a wrong version: an error status, no descriptor, then closed.
    UniqueFd fd = RawConnect(path);
    ASSERT_TRUE(fd.valid());
    ASSERT_TRUE(SendBytes(fd.get(), Header("TKVSHM01", 7, 4)));
    testing::Received r = ReadUntilEof(fd.get(), Millis(2000));
    EXPECT_TRUE(r.eof);
    EXPECT_EQ(r.fds, 0);
    Result<ShmReply> reply = DecodeShmReply(r.bytes.data(), r.bytes.size());
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->status, ToInt(ErrorCode::INVALID_PARAMS));
    EXPECT_EQ(reply->version, kShmProtocolVersion);
  }
  {  // An oversized name length: refused from the header alone, not read.
    UniqueFd fd = RawConnect(path);
    ASSERT_TRUE(fd.valid());
    ASSERT_TRUE(SendBytes(fd.get(), Header("TKVSHM01", 1, 1u << 30)));
    testing::Received r = ReadUntilEof(fd.get(), Millis(2000));
    EXPECT_TRUE(r.eof);
    EXPECT_EQ(r.fds, 0);
    Result<ShmReply> reply = DecodeShmReply(r.bytes.data(), r.bytes.size());
    ASSERT_TRUE(reply.ok()) << reply.status().ToString();
    EXPECT_EQ(reply->status, ToInt(ErrorCode::INVALID_PARAMS));
  }
  {  // Truncated, then the peer closes its side.
    UniqueFd fd = RawConnect(path);
    ASSERT_TRUE(fd.valid());
    std::vector<uint8_t> request = EncodeShmRequest(kSegmentName);
    request.resize(10);
    ASSERT_TRUE(SendBytes(fd.get(), request));
    ::shutdown(fd.get(), SHUT_WR);
    testing::Received r = ReadUntilEof(fd.get(), Millis(2000));
    EXPECT_TRUE(r.eof);
    EXPECT_TRUE(r.bytes.empty());
  }
  {  // Truncated and left hanging: closed once the handshake timeout passes.
    UniqueFd fd = RawConnect(path);
    ASSERT_TRUE(fd.valid());
    std::vector<uint8_t> request = EncodeShmRequest(kSegmentName);
    request.pop_back();
    ASSERT_TRUE(SendBytes(fd.get(), request));
    const auto start = std::chrono::steady_clock::now();
    testing::Received r = ReadUntilEof(fd.get(), Millis(3000));
    EXPECT_TRUE(r.eof);
    EXPECT_TRUE(r.bytes.empty());
    EXPECT_GE(std::chrono::steady_clock::now() - start, Millis(200));
  }
  {  // A proper request with bytes after it: served, then closed for breaking the protocol.
    UniqueFd fd = RawConnect(path);
    ASSERT_TRUE(fd.valid());
    std::vector<uint8_t> request = EncodeShmRequest(kSegmentName);
    request.push_back('!');
    ASSERT_TRUE(SendBytes(fd.get(), request));
    testing::Received r = ReadUntilEof(fd.get(), Millis(2000));
    EXPECT_TRUE(r.eof);
    EXPECT_EQ(r.bytes.size(), kShmReplySize);
    EXPECT_EQ(r.fds, 1);
  }
  EXPECT_TRUE(WaitUntil([&] { return server->open_connections() == 0; }));
  ShmSegmentMapper mapper;
  auto mapped = mapper.Map(path, kSegmentName, kTimeout);
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_TRUE((*mapped)->alive());
}

TEST_F(ShmTransportTest, ASilentPeerDoesNotHoldUpOthers) {
  auto server = StartServer();  // default 2 s handshake timeout
  ASSERT_NE(server, nullptr);
  std::vector<UniqueFd> silent;
  for (int i = 0; i < 8; ++i) {
    silent.push_back(RawConnect(server->path()));
    ASSERT_TRUE(silent.back().valid());
  }
  ShmSegmentMapper mapper;
  const auto start = std::chrono::steady_clock::now();
  auto mapped = mapper.Map(server->path(), kSegmentName, Millis(1000));
  ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, Millis(1000));
}

int OpenFdCount() {
  int count = 0;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    (void)entry;
    ++count;
  }
  return count;
}

TEST_F(ShmTransportTest, NoDescriptorIsLeaked) {
  const int before = OpenFdCount();
  {
    auto server = StartServer();
    ASSERT_NE(server, nullptr);
    ShmSegmentMapper mapper;
    std::vector<std::shared_ptr<MappedSegment>> held;
    for (int i = 0; i < 5; ++i) {
      auto good = mapper.Map(server->path(), kSegmentName, kTimeout);
      ASSERT_TRUE(good.ok()) << good.status().ToString();
      held.push_back(*good);
      EXPECT_FALSE(mapper.Map(server->path(), "other", kTimeout).ok());
    }
    held.pop_back();
    server->Stop();
    EXPECT_TRUE(WaitUntil([&] { return mapper.watched_connections() == 0; }));
    EXPECT_FALSE(mapper.Map(server->path(), kSegmentName, kTimeout).ok());
  }
  EXPECT_EQ(OpenFdCount(), before);
}

TEST_F(ShmTransportTest, MapTimesOutOnAServerThatNeverAnswers) {
  // A listening socket nobody accepts from: connect succeeds, the reply never comes.
  ASSERT_TRUE(EnsureIpcDir().ok());
  const std::string path = IpcPath("mute.sock");
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)),
            0);
  ASSERT_EQ(::listen(listener.get(), 4), 0);
  ShmSegmentMapper mapper;
  const auto start = std::chrono::steady_clock::now();
  auto mapped = mapper.Map(path, kSegmentName, Millis(200));
  EXPECT_TRUE(Refused(mapped.status(), ErrorCode::TRANSFER_FAIL, {path, "timed out"}));
  EXPECT_GE(std::chrono::steady_clock::now() - start, Millis(190));
  EXPECT_LT(std::chrono::steady_clock::now() - start, Millis(1500));
  ::unlink(path.c_str());
}

TEST_F(ShmTransportTest, StaleSocketFileIsReplaced) {
  ASSERT_TRUE(EnsureIpcDir().ok());
  const std::string path = IpcPath("store.sock");
  {  // A socket file left by a process that died: bound, never unlinked.
    UniqueFd stale(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
    ASSERT_EQ(::bind(stale.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0);
  }
  ASSERT_TRUE(fs::is_socket(path));
  auto server = StartServer();
  ASSERT_NE(server, nullptr);
  ShmSegmentMapper mapper;
  auto mapped = mapper.Map(path, kSegmentName, kTimeout);
  EXPECT_TRUE(mapped.ok()) << mapped.status().ToString();
}

TEST_F(ShmTransportTest, LiveSocketIsNotTakenOver) {
  auto first = StartServer();
  ASSERT_NE(first, nullptr);
  auto second = ShmSegmentServer::Start("store.sock", segment_);
  EXPECT_TRUE(Refused(second.status(), ErrorCode::INVALID_CONFIG,
                      {first->path(), "another server is listening"}));
  ShmSegmentMapper mapper;
  auto mapped = mapper.Map(first->path(), kSegmentName, kTimeout);
  EXPECT_TRUE(mapped.ok()) << mapped.status().ToString();
}

TEST_F(ShmTransportTest, OtherFilesAtThePathAreRefused) {
  ASSERT_TRUE(EnsureIpcDir().ok());
  const std::string path = IpcPath("store.sock");
  std::ofstream(path) << "keep me";
  auto server = ShmSegmentServer::Start("store.sock", segment_);
  EXPECT_TRUE(Refused(server.status(), ErrorCode::INVALID_CONFIG,
                      {path, "a regular file", "not a socket"}));
  std::ifstream in(path);
  std::string content;
  std::getline(in, content);
  EXPECT_EQ(content, "keep me");

  fs::remove(path);
  fs::create_directory(path);
  EXPECT_TRUE(Refused(ShmSegmentServer::Start("store.sock", segment_).status(),
                      ErrorCode::INVALID_CONFIG, {"a directory"}));
  fs::remove(path);
  fs::create_symlink(scratch_.base() / "elsewhere", path);
  EXPECT_TRUE(Refused(ShmSegmentServer::Start("store.sock", segment_).status(),
                      ErrorCode::INVALID_CONFIG, {"a symlink"}));
  EXPECT_TRUE(fs::is_symlink(path));
}

TEST_F(ShmTransportTest, TooLongSocketPathIsAClearError) {
  const fs::path long_base = scratch_.base() / std::string(120, 'd');
  ::setenv("TIERKV_IPC_DIR", long_base.c_str(), 1);
  auto server = ShmSegmentServer::Start("store.sock", segment_);
  EXPECT_TRUE(Refused(server.status(), ErrorCode::INVALID_CONFIG,
                      {IpcPath("store.sock"), "108", "TIERKV_IPC_DIR"}));
  EXPECT_FALSE(fs::exists(long_base));  // rejected before creating anything

  ShmSegmentMapper mapper;
  auto mapped = mapper.Map(IpcPath("store.sock"), kSegmentName, kTimeout);
  EXPECT_TRUE(Refused(mapped.status(), ErrorCode::INVALID_PARAMS, {"Unix socket path"}));
}

TEST_F(ShmTransportTest, BadArgumentsAreRefused) {
  for (const char* name : {"", ".", "..", "a/b"}) {
    EXPECT_TRUE(Refused(ShmSegmentServer::Start(name, segment_).status(), ErrorCode::INVALID_PARAMS,
                        {"socket name"}))
        << name;
  }
  EXPECT_TRUE(Refused(ShmSegmentServer::Start("s.sock", nullptr).status(),
                      ErrorCode::INVALID_PARAMS, {"no segment"}));
  ShmSegmentMapper mapper;
  EXPECT_TRUE(Refused(mapper.Map("/nonexistent.sock", "", kTimeout).status(),
                      ErrorCode::INVALID_PARAMS, {"segment name"}));
  EXPECT_TRUE(Refused(
      mapper.Map("/nonexistent.sock", std::string(kShmMaxNameLength + 1, 'x'), kTimeout).status(),
      ErrorCode::INVALID_PARAMS, {"segment name"}));
  EXPECT_TRUE(Refused(mapper.Map("", kSegmentName, kTimeout).status(), ErrorCode::INVALID_PARAMS,
                      {"Unix socket path"}));
}

TEST_F(ShmTransportTest, MapWithoutAServerNamesThePathAndTheReason) {
  ShmSegmentMapper mapper;
  const std::string path = IpcPath("nobody.sock");
  auto mapped = mapper.Map(path, kSegmentName, kTimeout);
  EXPECT_TRUE(Refused(mapped.status(), ErrorCode::TRANSFER_FAIL,
                      {path, kSegmentName, "connect", std::strerror(ENOENT)}));
}

}  // namespace
}  // namespace tierkv::transport
