// Time source, injectable so lease and timeout tests never sleep.
#pragma once

#include <atomic>
#include <chrono>

namespace tierkv {

using SteadyTime = std::chrono::steady_clock::time_point;
using Millis = std::chrono::milliseconds;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual SteadyTime Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  SteadyTime Now() const override { return std::chrono::steady_clock::now(); }
  static SystemClock* Instance() {
    static SystemClock clock;
    return &clock;
  }
};

// A clock that only moves when told to. Thread-safe.
class ManualClock final : public Clock {
 public:
  SteadyTime Now() const override { return SteadyTime(Millis(now_ms_.load())); }
  void Advance(Millis delta) { now_ms_ += delta.count(); }

 private:
  std::atomic<int64_t> now_ms_{1'000'000};
};

}  // namespace tierkv
