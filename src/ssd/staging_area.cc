#include "ssd/staging_area.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <optional>
#include <string>
#include <utility>

namespace tierkv {
namespace {

constexpr uint64_t kStagingAlignment = 4096;

uint64_t AlignUp(uint64_t n) { return (n + kStagingAlignment - 1) & ~(kStagingAlignment - 1); }

}  // namespace

Result<std::unique_ptr<StagingArea>> StagingArea::Create(const StagingOptions& options) {
  if (options.capacity == 0) {
    return Status(ErrorCode::INVALID_PARAMS, "staging area: capacity must be positive");
  }
  if (options.ttl.count() <= 0 || options.wait.count() < 0) {
    return Status(ErrorCode::INVALID_PARAMS, "staging area: ttl must be positive and wait >= 0");
  }
  if (options.clock == nullptr) {
    return Status(ErrorCode::INVALID_PARAMS, "staging area: no clock");
  }
  auto buffer = IoBuffer::Allocate(AlignUp(options.capacity), options.want_huge_pages);
  if (!buffer.ok()) return buffer.status();
  spdlog::info("staging area: {} bytes ({} pages)", AlignUp(options.capacity), buffer->page_kind());
  return std::unique_ptr<StagingArea>(new StagingArea(options, std::move(buffer).value()));
}

StagingArea::StagingArea(const StagingOptions& options, IoBuffer buffer)
    : options_(options),
      capacity_(AlignUp(options.capacity)),
      buffer_(std::move(buffer)),
      allocator_(OffsetAllocator::Create(capacity_, kStagingAlignment)) {}

Result<StagingArea::Reservation> StagingArea::Reserve(uint64_t bytes) {
  if (bytes == 0) return Status(ErrorCode::INVALID_PARAMS, "staging area: reserve of 0 bytes");
  if (bytes > capacity_) {
    return Status(ErrorCode::OBJECT_TOO_LARGE, "staging area: " + std::to_string(bytes) +
                                                   " bytes exceed the capacity of " +
                                                   std::to_string(capacity_) + "; split the batch");
  }
  const uint64_t size = AlignUp(bytes);
  // Waiting uses real time: a ManualClock (tests) would otherwise never let it end.
  const auto give_up = std::chrono::steady_clock::now() + options_.wait;
  std::unique_lock lock(mu_);
  bool waited = false;
  bool reclaimed = false;
  for (;;) {
    std::optional<Allocation> allocation = allocator_->Allocate(size);
    if (allocation) {
      const uint64_t ticket = next_ticket_++;
      Reservation r;
      r.ticket = ticket;
      r.offset = allocation->offset();
      r.data = buffer_.data() + r.offset;
      r.size = allocation->size();
      stats_.bytes_in_use += r.size;
      ++stats_.reservations;
      if (waited) ++stats_.waits;
      reservations_.emplace(ticket,
                            Ticket{std::move(*allocation), options_.clock->Now() + options_.ttl});
      return r;
    }
    // A vanished requester's tickets should not make live ones wait: reclaim once first.
    if (!reclaimed) {
      reclaimed = true;
      if (ReclaimExpiredLocked() > 0) {
        freed_.notify_all();  // other waiters may fit now too
        continue;
      }
    }
    if (std::chrono::steady_clock::now() >= give_up) break;
    waited = true;
    freed_.wait_until(lock, give_up);
  }
  if (waited) ++stats_.waits;
  ++stats_.timeouts;
  return Status(ErrorCode::NO_AVAILABLE_HANDLE,
                "staging area: no room for " + std::to_string(size) + " bytes within " +
                    std::to_string(options_.wait.count()) + " ms (" +
                    std::to_string(stats_.bytes_in_use) + " of " + std::to_string(capacity_) +
                    " bytes in use)");
}

Status StagingArea::Release(uint64_t ticket) {
  {
    std::lock_guard lock(mu_);
    auto it = reservations_.find(ticket);
    if (it == reservations_.end()) {
      return Status(ErrorCode::OBJECT_NOT_FOUND,
                    "staging area: ticket " + std::to_string(ticket) +
                        " is not held (released, reclaimed after its ttl, or unknown)");
    }
    stats_.bytes_in_use -= it->second.allocation.size();
    ++stats_.released;
    reservations_.erase(it);  // frees the range
  }
  freed_.notify_all();
  return Status::Ok();
}

bool StagingArea::Held(uint64_t ticket) const {
  std::lock_guard lock(mu_);
  return reservations_.count(ticket) > 0;
}

size_t StagingArea::ReclaimExpired() {
  size_t n = 0;
  {
    std::lock_guard lock(mu_);
    n = ReclaimExpiredLocked();
  }
  if (n > 0) freed_.notify_all();
  return n;
}

size_t StagingArea::ReclaimExpiredLocked() {
  const SteadyTime now = options_.clock->Now();
  size_t n = 0;
  for (auto it = reservations_.begin(); it != reservations_.end();) {
    if (it->second.deadline > now) {
      ++it;
      continue;
    }
    const uint64_t size = it->second.allocation.size();
    spdlog::warn(
        "staging area: ticket {} ({} bytes at offset {}) not released within {} ms; reclaimed "
        "(its requester died or hung)",
        it->first, size, it->second.allocation.offset(), options_.ttl.count());
    stats_.bytes_in_use -= size;
    ++stats_.reclaimed;
    ++n;
    it = reservations_.erase(it);
  }
  return n;
}

StagingStats StagingArea::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace tierkv
