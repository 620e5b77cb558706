// PeriodicThread: runs a task every `period` on a thread of its own until destroyed (the
// masters' maintenance and client reaper). The first run is one period after the start; the
// destructor wakes the thread, waits for a run in progress, and joins it.
// Thread-safety: construct and destroy from one thread; the task runs on the periodic thread.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

#include "common/clock.h"

namespace tierkv {

class PeriodicThread {
 public:
  PeriodicThread(Millis period, std::function<void()> task)
      : thread_([this, period, task = std::move(task)] {
          std::unique_lock lock(mu_);
          while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
            lock.unlock();
            task();
            lock.lock();
          }
        }) {}
  ~PeriodicThread() { Stop(); }
  PeriodicThread(const PeriodicThread&) = delete;
  PeriodicThread& operator=(const PeriodicThread&) = delete;

  // Stops and joins (idempotent; the destructor calls it).
  void Stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // guarded by mu_
  std::thread thread_;
};

}  // namespace tierkv
