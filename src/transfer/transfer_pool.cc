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
    (*job.fn)(job.base + i);
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

TransferPool::Stream::Stream(TransferPool& pool, size_t capacity, std::function<void(size_t)> fn)
    : pool_(pool), fn_(std::move(fn)), run_([this](size_t k) { fn_(order_[k]); }) {
  order_.reserve(capacity);
  jobs_.reserve(capacity);
}

void TransferPool::Stream::Push(size_t i) {
  if (pool_.workers_.empty() || order_.size() == order_.capacity()) {  // (more than promised)
    fn_(i);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = &run_;
  job->base = order_.size();
  job->n = 1;
  order_.push_back(i);  // before the job is published (under mu_): the worker sees it
  jobs_.push_back(job);
  {
    std::lock_guard lock(pool_.mu_);
    pool_.queue_.push_back(job);
  }
  pool_.cv_.notify_one();
}

void TransferPool::Stream::Finish() {
  if (jobs_.empty()) return;
  for (const auto& job : jobs_) Work(*job);  // claims only what no worker took
  for (const auto& job : jobs_) {
    std::unique_lock lock(job->mu);
    job->cv.wait(lock, [&] { return job->done.load() == job->n; });
  }
  {
    std::lock_guard lock(pool_.mu_);
    for (const auto& job : jobs_) std::erase(pool_.queue_, job);
  }
  jobs_.clear();
}

}  // namespace tierkv
