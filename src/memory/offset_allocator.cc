#include "memory/offset_allocator.h"

#include <cassert>

namespace tierkv {

Allocation& Allocation::operator=(Allocation&& other) noexcept {
  if (this != &other) {
    Reset();
    owner_ = std::move(other.owner_);
    offset_ = other.offset_;
    size_ = other.size_;
    other.owner_ = nullptr;
  }
  return *this;
}

void Allocation::Reset() {
  if (owner_) {
    owner_->Free(offset_, size_);
    owner_.reset();
  }
}

std::shared_ptr<OffsetAllocator> OffsetAllocator::Create(uint64_t capacity, uint64_t alignment) {
  assert(alignment != 0 && (alignment & (alignment - 1)) == 0);
  return std::shared_ptr<OffsetAllocator>(new OffsetAllocator(capacity, alignment));
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
  return Allocation(shared_from_this(), offset, aligned);
}

void OffsetAllocator::Free(uint64_t offset, uint64_t size) {
  std::lock_guard lock(mu_);
  used_ -= size;
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

uint64_t OffsetAllocator::used() const {
  std::lock_guard lock(mu_);
  return used_;
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
