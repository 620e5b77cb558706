// A small pool of copy threads for batch transfers.
//
// ParallelFor spreads a batch's objects over the workers and the calling
// thread, so a batch moves at more than one core's memcpy speed. Several
// callers may use one pool at once; their jobs are served in arrival order.
// Thread-safety: all methods are thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tierkv {

class TransferPool {
 public:
  // `threads` counts the calling thread: 1 = no workers, run inline.
  explicit TransferPool(unsigned threads);
  ~TransferPool();
  TransferPool(const TransferPool&) = delete;
  TransferPool& operator=(const TransferPool&) = delete;

  // Runs fn(i) for every i in [0, n) and returns when all calls have returned.
  // fn must not throw.
  void ParallelFor(size_t n, const std::function<void(size_t)>& fn);
  unsigned threads() const { return static_cast<unsigned>(workers_.size()) + 1; }

 private:
  struct Job {
    const std::function<void(size_t)>* fn = nullptr;
    size_t n = 0;
    std::atomic<size_t> next{0};
    std::atomic<size_t> done{0};
    std::mutex mu;
    std::condition_variable cv;
  };
  static void Work(Job& job);
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;  // guarded by mu_
  bool stop_ = false;                       // guarded by mu_
  std::vector<std::thread> workers_;
};

// Default thread count for `configured` (0 = min(4, hardware threads)).
unsigned DefaultTransferThreads(unsigned configured);

}  // namespace tierkv
