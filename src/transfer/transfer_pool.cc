#include "transfer/transfer_pool.h"

#include <algorithm>

namespace tierkv {

unsigned DefaultTransferThreads(unsigned configured) {
  if (configured > 0) return configured;
  return std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
}

TransferPool::TransferPool(unsigned threads) {
  for (unsigned i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

TransferPool::~TransferPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void TransferPool::Work(Job& job) {
  for (size_t i = job.next.fetch_add(1); i < job.n; i = job.next.fetch_add(1)) {
    (*job.fn)(i);
    if (job.done.fetch_add(1) + 1 == job.n) {
      std::lock_guard lock(job.mu);
      job.cv.notify_all();
    }
  }
}

void TransferPool::WorkerLoop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = queue_.front();
      if (job->next.load() >= job->n) {  // nothing left to claim: retire it
        queue_.pop_front();
        continue;
      }
    }
    Work(*job);
  }
}

void TransferPool::ParallelFor(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  if (workers_.empty() || n == 1) {
    for (size_t i = 0; i < n; ++i) fn(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &fn;
  job->n = n;
  {
    std::lock_guard lock(mu_);
    queue_.push_back(job);
  }
  if (n - 1 >= workers_.size()) {
    cv_.notify_all();
  } else {
    for (size_t i = 0; i + 1 < n; ++i) cv_.notify_one();
  }
  Work(*job);
  {
    std::unique_lock lock(job->mu);
    job->cv.wait(lock, [&] { return job->done.load() == n; });
  }
  std::lock_guard lock(mu_);
  std::erase(queue_, job);
}

}  // namespace tierkv
