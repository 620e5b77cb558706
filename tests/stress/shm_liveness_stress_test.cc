// The shm mapper's liveness under concurrency (run under TSan in CI): readers asking alive() on
// many threads while the watcher thread handles hang-ups, segments are dropped, the server stops
// and the mapper itself is destroyed. Nobody may see "alive" once the server has stopped, and no
// descriptor may be polled after it was closed (TSan and ASan watch the rest).
#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "memory/memory_segment.h"
#include "transport/shm_segment_client.h"
#include "transport/shm_segment_server.h"
#include "transport_test_util.h"

namespace tierkv::transport {
namespace {

constexpr uint64_t kLivenessSegmentSize = uint64_t{1} << 20;
constexpr const char* kLivenessSegmentName = "store-0/dram";
constexpr std::chrono::milliseconds kTimeout{5000};

TEST(ShmLivenessStress, ReadersRacingHangUpsDropsAndTheMappersEnd) {
  testing::ScratchIpcDir scratch;
  auto memory =
      MemorySegment::Create(kLivenessSegmentName, kLivenessSegmentSize, PagePolicy::kSmallPages);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  std::shared_ptr<MemorySegment> segment = std::move(*memory);

  for (int round = 0; round < 4; ++round) {
    auto started = ShmSegmentServer::Start("store.sock", segment);
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    std::unique_ptr<ShmSegmentServer> server = std::move(*started);
    auto mapper = std::make_unique<ShmSegmentMapper>();
    std::vector<std::shared_ptr<MappedSegment>> segments;
    for (int i = 0; i < 16; ++i) {
      auto mapped = mapper->Map(server->path(), kLivenessSegmentName, kTimeout);
      ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
      segments.push_back(*mapped);
    }

    std::atomic<bool> stopped{false};
    std::atomic<bool> done{false};
    std::atomic<int> alive_after_stop{0};
    std::vector<std::thread> readers;
    for (int t = 0; t < 3; ++t) {
      // Each reader holds its own copies: dropping the shared ones below must not matter.
      readers.emplace_back([&, held = segments] {
        while (!done.load()) {
          for (const auto& seg : held) {
            const bool was_stopped = stopped.load();
            if (seg->alive() && was_stopped) ++alive_after_stop;
          }
        }
      });
    }
    // Drop half of the mapper's own references while the readers poll (the readers keep theirs).
    segments.resize(8);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    server->Stop();
    stopped.store(true);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (round % 2 == 0) mapper.reset();  // the mapper goes while segments are still polled
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    done.store(true);
    for (std::thread& t : readers) t.join();
    EXPECT_EQ(alive_after_stop.load(), 0) << "round " << round;
    for (const auto& seg : segments) EXPECT_FALSE(seg->alive());
    if (mapper) {
      EXPECT_TRUE(testing::WaitUntil([&] { return mapper->watched_connections() == 0; }));
    }
  }
}

}  // namespace
}  // namespace tierkv::transport
