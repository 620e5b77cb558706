// TransferPool: ParallelFor and Stream run every index exactly once and return only when all
// calls have returned, with and without worker threads.
#include "transfer/transfer_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

namespace tierkv {
namespace {

TEST(TransferPoolTest, ParallelForRunsEveryIndexOnce) {
  for (unsigned threads : {1u, 2u, 4u}) {
    TransferPool pool(threads);
    std::vector<std::atomic<int>> runs(100);
    pool.ParallelFor(runs.size(), [&](size_t i) { runs[i].fetch_add(1); });
    for (size_t i = 0; i < runs.size(); ++i) EXPECT_EQ(runs[i].load(), 1) << threads << " " << i;
  }
}

TEST(TransferPoolTest, StreamRunsEachPushedIndexOnceAndFinishWaitsForThem) {
  for (unsigned threads : {1u, 2u, 4u}) {
    TransferPool pool(threads);
    std::vector<std::atomic<int>> runs(64);
    std::atomic<int> finished{0};
    {
      TransferPool::Stream stream(pool, 32, [&](size_t i) {
        std::this_thread::sleep_for(std::chrono::microseconds(200));  // still running at Finish
        runs[i].fetch_add(1);
        finished.fetch_add(1);
      });
      // Out of order, as a network batch's ops complete; one more than promised (runs inline).
      for (size_t i = 0; i < 33; ++i) stream.Push((i * 7) % 64);
      stream.Finish();
      EXPECT_EQ(finished.load(), 33) << threads << " threads: Finish returned before every call";
      stream.Finish();  // idempotent
    }
    for (size_t i = 0; i < 33; ++i) EXPECT_EQ(runs[(i * 7) % 64].load(), 1) << threads << " " << i;
    // A stream nothing was pushed to; and one left to its destructor.
    {
      TransferPool::Stream idle(pool, 4, [&](size_t) { ADD_FAILURE() << "never pushed"; });
    }
    std::atomic<int> by_destructor{0};
    {
      TransferPool::Stream stream(pool, 4, [&](size_t) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        by_destructor.fetch_add(1);
      });
      for (size_t i = 0; i < 4; ++i) stream.Push(i);
    }
    EXPECT_EQ(by_destructor.load(), 4) << threads << " threads";
  }
}

}  // namespace
}  // namespace tierkv
