// WriteBehind: copies freshly put objects to the SSD tier in the background
// (offload_write_policy "write_behind"), so a later eviction only frees memory.
//
// Keys queue up at PutEnd; one thread hands them to `copy` (the MasterService's CopyToDisk,
// restricted to its write-behind segments) in batches.
// The queue is bounded: when it is full, the oldest keys are dropped from it (they are then
// demoted at eviction, as with demote_on_evict) and counted. The destructor drains what is
// queued. Thread-safety: thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tierkv/status.h"

namespace tierkv {

class WriteBehind {
 public:
  static constexpr size_t kMaxQueued = 1 << 16;
  static constexpr size_t kBatch = 256;

  // CopyToDisk's signature: one status per key.
  using CopyFn = std::function<std::vector<Status>(const std::vector<std::string>&)>;

  explicit WriteBehind(CopyFn copy);
  ~WriteBehind();
  WriteBehind(const WriteBehind&) = delete;
  WriteBehind& operator=(const WriteBehind&) = delete;

  void Enqueue(const std::vector<std::string>& keys);
  // Blocks until everything queued so far was handed to the tier (tests, shutdown).
  void Drain();
  uint64_t dropped() const;
  uint64_t failed() const;

 private:
  void Loop();

  const CopyFn copy_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable idle_cv_;
  std::deque<std::string> queue_;  // guarded by mu_
  bool busy_ = false;              // guarded by mu_
  bool stop_ = false;              // guarded by mu_
  uint64_t dropped_ = 0;           // guarded by mu_
  uint64_t failed_ = 0;            // guarded by mu_
  std::thread thread_;
};

}  // namespace tierkv
