// The cross-process SSD tier paths under concurrency (run under TSan in CI):
//  - staged loads over UCX and over the TCP transport from three requesters while a writer keeps
//    appending to a small tier,
//    so regions are reused under the loads: every load is byte-exact or a clean error;
//  - RemoteTierMover with four demoting threads, a thread answering from the wire, and the
//    stream closing in the middle: every call returns one result per item, none hangs.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "device_test_util.h"
#include "memory/memory_segment.h"
#include "rpc/tier_moves.h"
#include "size_units.h"
#include "ssd/ssd_tier.h"
#include "store/tier_stager.h"
#include "transport/tcp_segment_client.h"
#include "transport/tcp_segment_server.h"
#include "transport/ucx_segment_client.h"
#include "transport/ucx_segment_server.h"

namespace tierkv {
namespace {

std::string Value(int n) {
  std::string s(16384 + static_cast<size_t>(n % 13) * 7000, '\0');
  std::mt19937 rng(static_cast<uint32_t>(n));
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// `tcp`: TcpSegmentServer/Client, else UcxSegmentServer/Client (over UCX's tcp).
void StagedLoadsRacingRegionReuse(bool tcp) {
  test_util::ScratchDir dir;
  SsdTierOptions o;
  o.paths = {dir.File("stress.tier")};
  o.region_size = kMiB;
  o.capacity_per_path = 4 * kMiB;  // 4 regions: reused every few hundred appends
  o.allow_buffered_fallback = dir.IsTmpfs();
  o.want_huge_pages = false;
  o.staging.capacity = kMiB;
  o.staging.want_huge_pages = false;
  o.staging.wait = std::chrono::milliseconds(5000);
  auto opened = SsdTier::Open(
      o, [](uint32_t, uint64_t, std::vector<std::string>) {}, nullptr);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  std::shared_ptr<SsdTier> tier = std::move(opened).value();
  auto segment = MemorySegment::Create("stress-seg", kMiB, PagePolicy::kSmallPages);
  ASSERT_TRUE(segment.ok());
  auto stager = TierStager::Start(tier, "stress");
  ASSERT_TRUE(stager.ok()) << stager.status().ToString();
  std::shared_ptr<TierStager> stages = std::move(stager).value();
  std::unique_ptr<transport::NetworkSegmentServer> server;
  if (tcp) {
    auto started =
        transport::TcpSegmentServer::Start(std::move(segment).value(), "127.0.0.1", 0, {}, stages);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server = std::move(started).value();
  } else {
    auto started =
        transport::UcxSegmentServer::Start(std::move(segment).value(), "127.0.0.1", 0, {}, stages);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    server = std::move(started).value();
  }

  struct Written {
    int n;
    DiskLocation location;
  };
  std::mutex mu;
  std::deque<Written> recent;  // guarded by mu
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int n = 0; !stop.load(); ++n) {
      const std::string v = Value(n);
      auto loc = tier->Append("k" + std::to_string(n), {ConstPiece{v.data(), v.size()}});
      if (n % 8 == 7) (void)tier->Flush();
      if (!loc.ok()) continue;
      std::lock_guard lock(mu);
      recent.push_back({n, *loc});
      if (recent.size() > 300) recent.pop_front();
    }
  });
  std::atomic<int> exact{0}, clean{0}, wrong{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 3; ++r) {
    readers.emplace_back([&, r] {
      std::unique_ptr<transport::NetworkSegmentClient> client;
      if (tcp) {
        auto c = transport::TcpSegmentClient::Connect(server->address(), "stress-seg",
                                                      std::chrono::milliseconds(5000));
        if (c.ok()) client = std::move(c).value();
      } else {
        auto c = transport::UcxSegmentClient::Connect(server->address(), "stress-seg",
                                                      std::chrono::milliseconds(5000));
        if (c.ok()) client = std::move(c).value();
      }
      if (client == nullptr) {
        wrong.fetch_add(1000);
        return;
      }
      std::mt19937 rng(static_cast<uint32_t>(r));
      for (int round = 0; round < 40; ++round) {
        std::vector<Written> pick;
        {
          std::lock_guard lock(mu);
          for (int k = 0; k < 6 && !recent.empty(); ++k)
            pick.push_back(recent[rng() % recent.size()]);
        }
        if (pick.empty()) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          continue;
        }
        std::vector<std::string> bufs;
        std::vector<transport::NetworkSegmentClient::StageOp> ops;
        for (const Written& w : pick) bufs.emplace_back(w.location.size, '\0');
        for (size_t k = 0; k < pick.size(); ++k) {
          ops.push_back({"k" + std::to_string(pick[k].n),
                         pick[k].location,
                         {MutPiece{bufs[k].data(), bufs[k].size()}}});
        }
        const auto done = client->StageBatch(ops, 0.9);
        for (size_t k = 0; k < pick.size(); ++k) {
          if (done[k].ok()) {
            (bufs[k] == Value(pick[k].n) ? exact : wrong).fetch_add(1);
          } else if (done[k].code() == ErrorCode::OBJECT_NOT_FOUND) {
            clean.fetch_add(1);  // the region was reused (or not yet flushed) under the load
          } else {
            ADD_FAILURE() << done[k].ToString();
          }
        }
      }
    });
  }
  for (auto& t : readers) t.join();
  stop.store(true);
  writer.join();
  server->Stop();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_GT(exact.load(), 0);
  EXPECT_GT(tier->stats().log.evicted_regions, 0u);
}

TEST(RemoteTierStress, StagedLoadsRacingRegionReuseAreExactOrClean) {
  StagedLoadsRacingRegionReuse(/*tcp=*/false);
}

TEST(RemoteTierStress, StagedLoadsOverTcpRacingRegionReuseAreExactOrClean) {
  StagedLoadsRacingRegionReuse(/*tcp=*/true);
}

TEST(RemoteTierStress, ConcurrentDemotionsAndACloseAllReturn) {
  std::mutex mu;
  std::deque<rpc::TierMoveRequest> wire;  // guarded by mu
  RemoteTierMover mover("stress-store", Millis(5000), [&](const rpc::TierMoveRequest& r) {
    std::lock_guard lock(mu);
    wire.push_back(r);
    return true;
  });
  std::atomic<bool> stop{false};
  std::thread answerer([&] {
    while (!stop.load()) {
      rpc::TierMoveRequest r;
      {
        std::unique_lock lock(mu);
        if (wire.empty()) {
          lock.unlock();
          std::this_thread::yield();
          continue;
        }
        r = wire.front();
        wire.pop_front();
      }
      rpc::TierMoveReply reply;
      reply.set_request_id(r.request_id());
      for (const auto& item : r.items()) {
        reply.add_codes(0);
        reply.add_locations()->set_size(item.size());
      }
      mover.Deliver(reply);
    }
  });
  std::atomic<int> results{0}, ok{0};
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const auto got =
            mover.Demote({DemoteItem{"k", 0, uint64_t(t * 1000 + i), 0}, DemoteItem{"j", 0, 5, 0}});
        results.fetch_add(static_cast<int>(got.size()));
        if (got.size() == 2 && got[0].ok() && got[0]->size == uint64_t(t * 1000 + i)) {
          ok.fetch_add(1);
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  mover.Close("test");
  for (auto& t : callers) t.join();
  stop.store(true);
  answerer.join();
  EXPECT_EQ(results.load(), 4 * 200 * 2);
  EXPECT_GT(ok.load(), 0);
}

}  // namespace
}  // namespace tierkv
