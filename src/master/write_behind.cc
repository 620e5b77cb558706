#include "master/write_behind.h"

#include <spdlog/spdlog.h>

namespace tierkv {

WriteBehind::WriteBehind(CopyFn copy) : copy_(std::move(copy)), thread_([this] { Loop(); }) {}

WriteBehind::~WriteBehind() {
  Drain();
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WriteBehind::Enqueue(const std::vector<std::string>& keys) {
  {
    std::lock_guard lock(mu_);
    for (const auto& k : keys) {
      if (queue_.size() >= kMaxQueued) {
        queue_.pop_front();
        ++dropped_;
      }
      queue_.push_back(k);
    }
  }
  cv_.notify_one();
}

void WriteBehind::Drain() {
  std::unique_lock lock(mu_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !busy_; });
}

uint64_t WriteBehind::dropped() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

uint64_t WriteBehind::failed() const {
  std::lock_guard lock(mu_);
  return failed_;
}

void WriteBehind::Loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty() && stop_) return;
    std::vector<std::string> batch;
    while (!queue_.empty() && batch.size() < kBatch) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    busy_ = true;
    lock.unlock();
    const std::vector<Status> results = copy_(batch);
    uint64_t failed = 0;
    for (size_t i = 0; i < results.size(); ++i) {
      // Removed or evicted since the put: nothing to copy.
      if (results[i].ok() || results[i].code() == ErrorCode::OBJECT_NOT_FOUND) continue;
      ++failed;
      spdlog::warn("write-behind of {}: {}", batch[i], results[i].ToString());
    }
    lock.lock();
    failed_ += failed;
    busy_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace tierkv
