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
  struct Job;

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

  // fn(i) for indices that become ready one by one (the ops of a network batch, as each one's
  // last byte arrives): Push(i) hands i to the workers at once (with no workers, runs fn(i)
  // there); Finish() runs on the calling thread what no worker has taken yet and returns when
  // every pushed call has returned. Pushes beyond `capacity` run inline. Pushes must not race
  // (one thread, or the caller's lock); the pushing side finishes, or the destructor does. fn
  // must not throw.
  class Stream {
   public:
    Stream(TransferPool& pool, size_t capacity, std::function<void(size_t)> fn);
    ~Stream() { Finish(); }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    void Push(size_t i);
    void Finish();

   private:
    TransferPool& pool_;
    std::function<void(size_t)> fn_;
    std::function<void(size_t)> run_;  // run_(k) = fn_(order_[k])
    std::vector<size_t> order_;        // the pushed indices; reserved, never reallocated
    std::vector<std::shared_ptr<Job>> jobs_;
  };

 private:
  struct Job {
    const std::function<void(size_t)>* fn = nullptr;
    size_t base = 0;  // Work calls fn(base + i)
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
