#include "memory/offset_allocator.h"

#include <cassert>

namespace tierkv {

Allocation::Allocation(OffsetAllocator* owner, uint64_t offset, uint64_t size)
    : owner_(owner), offset_(offset), size_(size) {
  owner_->refs_.fetch_add(1, std::memory_order_relaxed);
}

Allocation& Allocation::operator=(Allocation&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = other.owner_;
    offset_ = other.offset_;
    size_ = other.size_;
    other.owner_ = nullptr;
  }
  return *this;
}

void Allocation::Reset() {
  if (owner_) {
    OffsetAllocator* owner = owner_;
    owner_ = nullptr;
    owner->Free(offset_, size_);
    owner->Unref();
  }
}

std::shared_ptr<OffsetAllocator> OffsetAllocator::Create(uint64_t capacity, uint64_t alignment) {
  assert(alignment != 0 && (alignment & (alignment - 1)) == 0);
  // The shared_ptrs together hold one reference (refs_ starts at 1); their deleter drops it.
  return std::shared_ptr<OffsetAllocator>(new OffsetAllocator(capacity, alignment),
                                          [](OffsetAllocator* a) { a->Unref(); });
}

void OffsetAllocator::Unref() {
  if (refs_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete this;
}

OffsetAllocator::OffsetAllocator(uint64_t capacity, uint64_t alignment)
    : capacity_(capacity & ~(alignment - 1)), alignment_(alignment) {
  if (capacity_ > 0) InsertFree(0, capacity_);
}

void OffsetAllocator::InsertFree(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

std::optional<Allocation> OffsetAllocator::Allocate(uint64_t size) {
  if (size == 0 || size > capacity_) return std::nullopt;
  const uint64_t aligned = (size + alignment_ - 1) & ~(alignment_ - 1);
  std::lock_guard lock(mu_);
  auto it = free_by_size_.lower_bound({aligned, 0});  // best fit: smallest range that fits
  if (it == free_by_size_.end()) return std::nullopt;
  const uint64_t range_size = it->first;
  const uint64_t offset = it->second;
  free_by_size_.erase(it);
  free_by_offset_.erase(offset);
  if (range_size > aligned) InsertFree(offset + aligned, range_size - aligned);
  used_ += aligned;
  return Allocation(this, offset, aligned);
}

std::optional<Allocation> OffsetAllocator::AllocateAt(uint64_t offset, uint64_t size) {
  if (size == 0 || size > capacity_ || (offset & (alignment_ - 1)) != 0) return std::nullopt;
  const uint64_t aligned = (size + alignment_ - 1) & ~(alignment_ - 1);
  if (offset > capacity_ - aligned) return std::nullopt;
  std::lock_guard lock(mu_);
  // The free range that starts at or before `offset` must cover the whole request.
  auto it = free_by_offset_.upper_bound(offset);
  if (it == free_by_offset_.begin()) return std::nullopt;
  --it;
  const uint64_t start = it->first;
  const uint64_t range_size = it->second;
  if (start + range_size < offset + aligned) return std::nullopt;
  free_by_size_.erase({range_size, start});
  free_by_offset_.erase(it);
  if (offset > start) InsertFree(start, offset - start);
  if (start + range_size > offset + aligned) {
    InsertFree(offset + aligned, start + range_size - offset - aligned);
  }
  used_ += aligned;
  return Allocation(this, offset, aligned);
}

void OffsetAllocator::SetFence(std::shared_ptr<FreeFence> fence) {
  if (!fence) return;
  std::lock_guard lock(mu_);
  if (fence_owner_) return;
  fence_owner_ = std::move(fence);
  fence_.store(fence_owner_.get(), std::memory_order_release);
}

void OffsetAllocator::Free(uint64_t offset, uint64_t size) {
  FreeFence* fence = fence_.load(std::memory_order_acquire);
  // The fence is asked without mu_ (it takes its own lock, which may be held by a thread that
  // then frees into this allocator).
  const uint64_t ticket = fence != nullptr ? fence->OnFree(offset, size) : 0;
  std::lock_guard lock(mu_);
  used_ -= size;
  if (ticket > released_) {
    quarantine_.emplace(ticket, std::make_pair(offset, size));
    quarantined_ += size;
    return;
  }
  FreeLocked(offset, size);
}

void OffsetAllocator::FreeLocked(uint64_t offset, uint64_t size) {
  auto erase_by_size = [this](uint64_t sz, uint64_t off) { free_by_size_.erase({sz, off}); };
  // Merge with the free neighbour after, then the one before.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == offset + size) {
    size += next->second;
    erase_by_size(next->second, next->first);
    next = free_by_offset_.erase(next);
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      size += prev->second;
      erase_by_size(prev->second, prev->first);
      free_by_offset_.erase(prev);
    }
  }
  InsertFree(offset, size);
}

void OffsetAllocator::Release(uint64_t ticket) {
  {
    std::lock_guard lock(mu_);
    if (ticket <= released_) return;
    released_ = ticket;
    auto end = quarantine_.upper_bound(ticket);
    for (auto it = quarantine_.begin(); it != end; ++it) {
      quarantined_ -= it->second.second;
      FreeLocked(it->second.first, it->second.second);
    }
    quarantine_.erase(quarantine_.begin(), end);
  }
  released_cv_.notify_all();
}

bool OffsetAllocator::WaitForQuarantine(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  if (quarantine_.empty()) return true;
  const uint64_t target = quarantine_.rbegin()->first;
  return released_cv_.wait_for(lock, timeout, [&] { return released_ >= target; });
}

uint64_t OffsetAllocator::used() const {
  std::lock_guard lock(mu_);
  return used_;
}

uint64_t OffsetAllocator::quarantined() const {
  std::lock_guard lock(mu_);
  return quarantined_;
}

uint64_t OffsetAllocator::largest_free() const {
  std::lock_guard lock(mu_);
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

size_t OffsetAllocator::free_ranges() const {
  std::lock_guard lock(mu_);
  return free_by_offset_.size();
}

}  // namespace tierkv
