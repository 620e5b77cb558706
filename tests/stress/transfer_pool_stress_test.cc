// TransferPool under concurrency (run under TSan in CI): several callers stream work into one
// pool at once, each from two producer threads (as two drives' completion threads report
// reads), beside ParallelFor callers; every pushed index runs exactly once and Finish returns
// only after all of them.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "transfer/transfer_pool.h"

namespace tierkv {
namespace {

TEST(TransferPoolStress, StreamsAndParallelForsShareOnePool) {
  TransferPool pool(3);
  constexpr int kCallers = 4;
  constexpr size_t kItems = 64;
  constexpr int kRounds = 50;
  std::atomic<int> failures{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < kCallers; ++c) {
    callers.emplace_back([&, c] {
      for (int round = 0; round < kRounds; ++round) {
        std::vector<std::atomic<int>> runs(kItems);
        if (c % 2 == 0) {
          TransferPool::Stream stream(pool, kItems, [&](size_t i) { runs[i].fetch_add(1); });
          std::mutex push_mu;
          auto producer = [&](size_t first) {
            for (size_t i = first; i < kItems; i += 2) {
              std::lock_guard lock(push_mu);
              stream.Push(i);
            }
          };
          std::thread even(producer, 0), odd(producer, 1);
          even.join();
          odd.join();
          stream.Finish();
        } else {
          pool.ParallelFor(kItems, [&](size_t i) { runs[i].fetch_add(1); });
        }
        for (size_t i = 0; i < kItems; ++i) {
          if (runs[i].load() != 1) failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0) << "an index ran other than exactly once";
}

}  // namespace
}  // namespace tierkv
