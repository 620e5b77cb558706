// FaultyDevice: wraps any Device and injects IO faults deterministically, for tests.
//
// What: every request goes to the wrapped device unless a fault rule fires for it. Rules
// (FaultRule) name a fault kind and a trigger: kOnce (the next request of the rule's
// direction), kEveryNth (the N-th, 2N-th, ... request of its direction since the rule was
// added) or kOffsetRange (every request of its direction overlapping [begin, end)). Rules
// are checked in the order added; the first that fires decides the request; requests are
// counted in call order (a batch in request order), so the same calls give the same faults.
//
// Faults: EIO on read (FILE_READ_FAIL) or write (FILE_WRITE_FAIL), ENOSPC on write
// (FILE_WRITE_FAIL), short read/write (the first half of the request, rounded down to the
// alignment, really goes to the wrapped device; then FILE_READ_FAIL/FILE_WRITE_FAIL with the
// byte counts). Injected messages end with "(injected)". Only the faulted request fails; the
// others of a batch go to the wrapped device as one batch.
//
// Errors: INVALID_PARAMS (Device contract, checked before any rule counts the request),
// injected faults, and whatever the wrapped device returns.
// Ownership: owns the wrapped device. Thread-safety: thread-safe; rules and counters are
// guarded by a mutex (with concurrent callers the order, hence which request faults, is
// whatever order they reach the mutex in).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "device/device.h"

namespace tierkv {

enum class FaultKind {
  kReadEio,
  kWriteEio,
  kShortRead,
  kShortWrite,
  kWriteEnospc,
};

enum class FaultTrigger {
  kOnce,
  kEveryNth,
  kOffsetRange,
};

struct FaultRule {
  FaultKind kind = FaultKind::kReadEio;
  FaultTrigger trigger = FaultTrigger::kOnce;
  uint64_t every_n = 1;      // kEveryNth: N (>= 1)
  uint64_t range_begin = 0;  // kOffsetRange: [range_begin, range_end)
  uint64_t range_end = 0;

  static FaultRule Once(FaultKind kind) { return FaultRule{kind, FaultTrigger::kOnce, 1, 0, 0}; }
  static FaultRule EveryNth(FaultKind kind, uint64_t n) {
    return FaultRule{kind, FaultTrigger::kEveryNth, n, 0, 0};
  }
  static FaultRule InRange(FaultKind kind, uint64_t begin, uint64_t end) {
    return FaultRule{kind, FaultTrigger::kOffsetRange, 1, begin, end};
  }
};

// Requests seen (valid ones only) and faults injected, per kind.
struct FaultCounters {
  uint64_t reads = 0;
  uint64_t writes = 0;
  uint64_t read_eio = 0;
  uint64_t write_eio = 0;
  uint64_t short_read = 0;
  uint64_t short_write = 0;
  uint64_t write_enospc = 0;
  uint64_t injected() const {
    return read_eio + write_eio + short_read + short_write + write_enospc;
  }
};

class FaultyDevice final : public Device {
 public:
  // Same size and alignment as `inner`, which must be non-null.
  explicit FaultyDevice(std::unique_ptr<Device> inner);

  // Adds a rule (INVALID_PARAMS for every_n == 0 or an empty range); ClearFaults drops all
  // rules but keeps the counters. Thread-safe.
  Status AddFault(const FaultRule& rule);
  void ClearFaults();
  FaultCounters counters() const;
  Device* inner() const { return inner_.get(); }

 protected:
  Status DoRead(uint64_t offset, void* buf, uint64_t len) override;
  Status DoWrite(uint64_t offset, const void* buf, uint64_t len) override;
  std::vector<Status> DoReadBatch(const std::vector<IoRequest>& requests,
                                  const IoDone& on_done) override;
  std::vector<Status> DoWriteBatch(const std::vector<IoRequest>& requests,
                                   const IoDone& on_done) override;

 private:
  struct ArmedRule {
    FaultRule rule;
    uint64_t seen = 0;   // requests of the rule's direction since it was added
    bool spent = false;  // a kOnce rule that fired
  };
  // Counts the request and returns the fault to inject, if any.
  std::optional<FaultKind> Decide(bool write, uint64_t offset, uint64_t len);
  // Performs one request under `fault` (none: plain pass-through).
  Status Apply(std::optional<FaultKind> fault, bool write, uint64_t offset, void* buf,
               uint64_t len);
  std::vector<Status> Batch(const std::vector<IoRequest>& requests, bool write,
                            const IoDone& on_done);

  const std::unique_ptr<Device> inner_;
  mutable std::mutex mu_;
  std::vector<ArmedRule> rules_;  // guarded by mu_
  FaultCounters counters_;        // guarded by mu_
};

}  // namespace tierkv
