// Tier moves across processes (src/rpc/tier_moves.h): the master's RemoteTierMover on its own
// (answers, timeouts, a closed stream, malformed answers), and the whole TierMoves stream
// between an in-process MasterServer and a SegmentLink over gRPC on 127.0.0.1 (demotions reach
// the owner's mover; the link follows a re-mount after the client expired; a refused hello).
#include "rpc/tier_moves.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "rpc/master_server.h"
#include "rpc/remote_master.h"
#include "rpc/segment_link.h"

namespace tierkv {
namespace {

using namespace std::chrono_literals;

bool WaitUntil(const std::function<bool()>& pred, Millis timeout = Millis(5000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Records what RemoteTierMover writes.
struct Wire {
  std::mutex mu;
  std::vector<rpc::TierMoveRequest> sent;
  bool broken = false;
  std::function<bool(const rpc::TierMoveRequest&)> Writer() {
    return [this](const rpc::TierMoveRequest& r) {
      std::lock_guard lock(mu);
      if (broken) return false;
      sent.push_back(r);
      return true;
    };
  }
  size_t count() {
    std::lock_guard lock(mu);
    return sent.size();
  }
  rpc::TierMoveRequest last() {
    std::lock_guard lock(mu);
    return sent.back();
  }
};

std::vector<DemoteItem> Items(int n) {
  std::vector<DemoteItem> items;
  for (int i = 0; i < n; ++i) {
    items.push_back(DemoteItem{"k" + std::to_string(i), uint64_t(i) * 4096, 100u + i, 7u});
  }
  return items;
}

TEST(RemoteTierMoverTest, AnswersComeBackPerItem) {
  Wire wire;
  RemoteTierMover mover("store-a", Millis(5000), wire.Writer());
  std::vector<Result<DiskLocation>> got;
  std::thread caller([&] { got = mover.Demote(Items(3)); });
  ASSERT_TRUE(WaitUntil([&] { return wire.count() == 1; }));
  const rpc::TierMoveRequest sent = wire.last();
  ASSERT_EQ(sent.items_size(), 3);
  EXPECT_EQ(sent.items(1).key(), "k1");
  EXPECT_EQ(sent.items(1).offset(), 4096u);
  EXPECT_EQ(sent.items(2).size(), 102u);
  rpc::TierMoveReply reply;
  reply.set_request_id(sent.request_id());
  for (int i = 0; i < 3; ++i) {
    reply.add_codes(i == 1 ? ToInt(ErrorCode::FILE_WRITE_FAIL) : 0);
    rpc::DiskLocation* l = reply.add_locations();
    l->set_region(5);
    l->set_generation(9);
    l->set_offset(4096u * i);
    l->set_size(100u + i);
  }
  rpc::KeyMessage* m = reply.add_messages();
  m->set_index(1);
  m->set_message("EIO (injected)");
  mover.Deliver(reply);
  caller.join();
  ASSERT_EQ(got.size(), 3u);
  ASSERT_TRUE(got[0].ok());
  EXPECT_EQ(got[0]->region, 5u);
  EXPECT_EQ(got[2]->offset, 8192u);
  EXPECT_EQ(got[1].code(), ErrorCode::FILE_WRITE_FAIL);
  EXPECT_NE(got[1].status().message().find("EIO (injected)"), std::string::npos);
  mover.Deliver(reply);  // a second (late) answer is ignored
}

TEST(RemoteTierMoverTest, NoAnswerTimesOutAndALateOneIsIgnored) {
  Wire wire;
  RemoteTierMover mover("store-b", Millis(100), wire.Writer());
  const auto start = std::chrono::steady_clock::now();
  const auto got = mover.Demote(Items(2));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 90ms);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].code(), ErrorCode::TRANSFER_FAIL);
  EXPECT_NE(got[0].status().message().find("no answer within 100 ms"), std::string::npos);
  rpc::TierMoveReply late;
  late.set_request_id(wire.last().request_id());
  late.add_codes(0);
  late.add_codes(0);
  late.add_locations();
  late.add_locations();
  mover.Deliver(late);  // nobody waits for it: ignored
}

TEST(RemoteTierMoverTest, MalformedAnswersAndAClosedStreamFailTheItems) {
  Wire wire;
  RemoteTierMover mover("store-c", Millis(5000), wire.Writer());
  std::vector<Result<DiskLocation>> got;
  std::thread caller([&] { got = mover.Demote(Items(2)); });
  ASSERT_TRUE(WaitUntil([&] { return wire.count() == 1; }));
  rpc::TierMoveReply wrong;
  wrong.set_request_id(wire.last().request_id());
  wrong.add_codes(0);  // one result for two items
  wrong.add_locations();
  mover.Deliver(wrong);
  caller.join();
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].code(), ErrorCode::RPC_FAIL);
  EXPECT_EQ(got[1].code(), ErrorCode::RPC_FAIL);

  // Closed while a demotion waits: it fails at once, and so does every later one, unwritten.
  std::thread waiting([&] { got = mover.Demote(Items(1)); });
  ASSERT_TRUE(WaitUntil([&] { return wire.count() == 2; }));
  mover.Close("the store went");
  waiting.join();
  EXPECT_EQ(got[0].code(), ErrorCode::TRANSFER_FAIL);
  EXPECT_NE(got[0].status().message().find("the store went"), std::string::npos);
  got = mover.Demote(Items(1));
  EXPECT_EQ(got[0].code(), ErrorCode::TRANSFER_FAIL);
  EXPECT_EQ(wire.count(), 2u);

  Wire broken;
  broken.broken = true;
  RemoteTierMover dead("store-d", Millis(5000), broken.Writer());
  got = dead.Demote(Items(1));
  EXPECT_EQ(got[0].code(), ErrorCode::TRANSFER_FAIL);
}

// The owner's mover in these tests: answers each item with a location derived from it.
class FakeMover final : public TierMover {
 public:
  std::vector<Result<DiskLocation>> Demote(const std::vector<DemoteItem>& items) override {
    std::vector<Result<DiskLocation>> out;
    for (const auto& item : items) {
      keys.fetch_add(1);
      if (item.key.rfind("fail", 0) == 0) {
        out.emplace_back(Status(ErrorCode::FILE_WRITE_FAIL, "no room (test)"));
      } else {
        out.emplace_back(DiskLocation{1, 2, item.offset, item.size});
      }
    }
    return out;
  }
  std::atomic<int> keys{0};
};

class TierMoveStreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MasterServerOptions o;
    o.port = 0;
    o.client_ttl = Millis(600);
    auto server = MasterServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status().ToString();
    server_ = std::move(server).value();
  }
  std::unique_ptr<RemoteMaster> Connect(Millis heartbeat = Millis(100)) {
    RemoteMasterOptions o;
    o.heartbeat_interval = heartbeat;
    auto m = RemoteMaster::Connect(server_->address(), Millis(5000), o);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return m.ok() ? std::move(m).value() : nullptr;
  }
  // Puts `key` (complete) on `segment` of the master.
  void PutOn(const std::string& key, uint64_t size) {
    ReplicateConfig rc;
    auto started = server_->master().PutStart({key}, {size}, rc);
    ASSERT_TRUE(started[0].ok()) << started[0].status().ToString();
    ASSERT_TRUE(server_->master().PutEnd({key}, {started[0]->put_id}, {42})[0].ok());
  }
  std::unique_ptr<MasterServer> server_;
};

TEST_F(TierMoveStreamTest, CopiesReachTheOwnersMoverAndComeBackAsDiskReplicas) {
  auto owner = Connect();
  ASSERT_NE(owner, nullptr);
  auto segment = owner->MountSegment("owner-seg", 1 << 20);
  ASSERT_TRUE(segment.ok());
  auto mover = std::make_shared<FakeMover>();
  SegmentLinkOptions options;
  options.mover = mover;
  SegmentLink link(*owner, *segment, options);
  ASSERT_TRUE(WaitUntil([&] { return link.connected(); }));
  PutOn("a", 1000);
  PutOn("fail-b", 2000);
  const auto copied = server_->master().CopyToDisk({"a", "fail-b"});
  EXPECT_TRUE(copied[0].ok()) << copied[0].ToString();
  EXPECT_EQ(copied[1].code(), ErrorCode::FILE_WRITE_FAIL) << copied[1].ToString();
  EXPECT_EQ(mover->keys.load(), 2);
  EXPECT_EQ(link.requests(), 1u);
  auto replicas = server_->master().GetReplicas({"a"});
  ASSERT_TRUE(replicas[0].ok());
  ASSERT_EQ(replicas[0]->replicas.size(), 2u);
  EXPECT_EQ(replicas[0]->replicas[1].tier, ReplicaTier::kDisk);
  EXPECT_EQ(replicas[0]->replicas[1].disk.region, 1u);
}

TEST_F(TierMoveStreamTest, TheLinkFollowsARemountAfterExpiry) {
  auto owner = Connect(Millis(0));  // silent: the master expires it after 600 ms
  ASSERT_NE(owner, nullptr);
  auto segment = owner->MountSegment("owner-seg", 1 << 20);
  ASSERT_TRUE(segment.ok());
  auto mover = std::make_shared<FakeMover>();
  SegmentLinkOptions options;
  options.mover = mover;
  options.retry = Millis(20);
  SegmentLink link(*owner, *segment, options);
  ASSERT_TRUE(WaitUntil([&] { return link.connected(); }));
  const uint64_t first_id = owner->CurrentSegmentId(*segment);
  // The expiry drops the client first and unmounts its segments after: wait for both, or the
  // re-mount below finds the old segment still there (and this silent client never retries).
  ASSERT_TRUE(WaitUntil(
      [&] { return server_->clients().size() == 0 && server_->master().segments().Count() == 0; },
      Millis(5000)));
  ASSERT_TRUE(owner->Ping().ok());  // registers again and re-mounts under a new id
  const uint64_t second_id = owner->CurrentSegmentId(*segment);
  ASSERT_NE(second_id, first_id);
  ASSERT_TRUE(WaitUntil([&] { return link.opened() >= 2 && link.connected(); }));
  // Demotions of the new segment reach the owner again.
  PutOn("c", 500);
  const auto copied = server_->master().CopyToDisk({"c"});
  EXPECT_TRUE(copied[0].ok()) << copied[0].ToString();
  EXPECT_EQ(mover->keys.load(), 1);
}

TEST_F(TierMoveStreamTest, AHelloForASegmentTheClientDoesNotOwnIsRefused) {
  auto owner = Connect();
  auto other = Connect();
  ASSERT_TRUE(owner && other);
  auto segment = owner->MountSegment("owner-seg", 1 << 20);
  ASSERT_TRUE(segment.ok());
  rpc::TierMoveReply hello;
  hello.set_client_id(other->client_id());
  hello.set_segment_id(static_cast<uint32_t>(*segment));
  auto refused =
      server_->handler().OpenTierMoves(hello, [](const rpc::TierMoveRequest&) { return true; });
  EXPECT_EQ(refused.code(), ErrorCode::SEGMENT_NOT_FOUND) << refused.status().ToString();
  hello.set_client_id(owner->client_id());
  hello.add_codes(0);  // a first message carrying results
  EXPECT_EQ(server_->handler()
                .OpenTierMoves(hello, [](const rpc::TierMoveRequest&) { return true; })
                .code(),
            ErrorCode::INVALID_PARAMS);
}

}  // namespace
}  // namespace tierkv
