// StagingArea: the owner-side buffer that disk reads land in before a requester pulls them.
//
// What: one aligned, pre-faulted IoBuffer of `capacity` bytes (2 MiB pages where possible)
// carved into per-batch reservations. A requester asks the owner to stage a batch; the owner
// reserves StagingNeed() bytes per piece in one reservation, reads the aligned record ranges
// into it and hands back a ticket; the requester copies the bytes out and releases the
// ticket. A ticket not released within `ttl` (its requester died or hung) is reclaimed by
// ReclaimExpired(), so a vanished requester cannot leak the budget.
//
// Waiting: when the buffer is busy, Reserve() first reclaims expired tickets, then waits up
// to `wait` (real time, whatever the clock) for releases (requesters share the budget); a
// reservation larger than the whole capacity fails at once. Sizes are rounded up to 4096.
//
// Errors: Create: INVALID_PARAMS (capacity 0, ttl <= 0, negative wait, no clock),
// INTERNAL_ERROR (the buffer cannot be mapped). Reserve: INVALID_PARAMS (0 bytes),
// OBJECT_TOO_LARGE (more than capacity; the requester must split, see StagingNeed),
// NO_AVAILABLE_HANDLE (no space within `wait`). Release: OBJECT_NOT_FOUND for an unknown,
// released or reclaimed ticket (0 is never a ticket).
// Thread-safety: all methods are thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

#include "common/clock.h"
#include "device/io_buffer.h"
#include "memory/offset_allocator.h"
#include "tierkv/status.h"

namespace tierkv {

// Staging bytes one piece of `length` value bytes needs: the aligned read of its record
// range (header and key included for the first piece) fits in align_up(length, 4096) + 8192.
// Requesters split batches with this same formula.
inline uint64_t StagingNeed(uint64_t length) { return ((length + 4095) & ~uint64_t{4095}) + 8192; }

// The most staging one batch of reads takes, both in a store's TierStager and in the in-process
// StagedLoader: all reads of a batch are in flight together and complete together, so a batch's
// bytes are sent (or copied out) while the next batch is read. Measured with `tierkv bench
// disk-remote` (1 GiB of 2 MiB objects over tcp): batches of half the buffer (up to 32 reads)
// loaded at 1.2 GB/s, batches of 8 objects at 1.7-1.8 GB/s (4: no better).
inline constexpr uint64_t kStageBatchBytes = uint64_t{8} * ((2u << 20) + 8192);

struct StagingOptions {
  uint64_t capacity = uint64_t{1280} << 20;
  Millis ttl{30000};  // reservations older than this are reclaimed
  Millis wait{5000};  // how long Reserve() waits for space
  bool want_huge_pages = true;
  const Clock* clock = SystemClock::Instance();
};

struct StagingStats {
  uint64_t reservations = 0;
  uint64_t released = 0;
  uint64_t reclaimed = 0;  // expired tickets freed by ReclaimExpired
  uint64_t waits = 0;      // reservations that had to wait for space
  uint64_t timeouts = 0;   // NO_AVAILABLE_HANDLE
  uint64_t bytes_in_use = 0;
};

class StagingArea {
 public:
  static Result<std::unique_ptr<StagingArea>> Create(const StagingOptions& options);

  struct Reservation {
    uint64_t ticket = 0;
    uint8_t* data = nullptr;  // 4096-aligned, `size` bytes
    uint64_t offset = 0;      // of data in the buffer (what a remote requester names)
    uint64_t size = 0;
  };
  Result<Reservation> Reserve(uint64_t bytes);
  Status Release(uint64_t ticket);
  // True while `ticket` is reserved (not released or reclaimed). A requester copying out of
  // a reservation checks this after the copy: false means the bytes may be a new tenant's.
  bool Held(uint64_t ticket) const;
  // Frees reservations older than ttl; returns how many.
  size_t ReclaimExpired();

  uint64_t capacity() const { return capacity_; }  // options.capacity rounded up to 4096
  const uint8_t* base() const { return buffer_.data(); }
  StagingStats stats() const;

 private:
  StagingArea(const StagingOptions& options, IoBuffer buffer);

  struct Ticket {
    Allocation allocation;
    SteadyTime deadline;  // options_.clock time after which ReclaimExpired frees it
  };
  size_t ReclaimExpiredLocked();  // requires mu_
  const StagingOptions options_;
  const uint64_t capacity_;
  IoBuffer buffer_;
  std::shared_ptr<OffsetAllocator> allocator_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  uint64_t next_ticket_ = 1;                 // guarded by mu_
  std::map<uint64_t, Ticket> reservations_;  // guarded by mu_
  StagingStats stats_;                       // guarded by mu_
};

}  // namespace tierkv
