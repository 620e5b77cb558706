#include "client/buffer_registry.h"

#include <mutex>
#include <string>

namespace tierkv {

Status BufferRegistry::Register(const void* ptr, size_t size) {
  if (ptr == nullptr || size == 0) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "register_buffer needs a non-null pointer and size > 0");
  }
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  if (start + size < start)
    return Status(ErrorCode::INVALID_PARAMS, "buffer wraps the address space");
  std::unique_lock lock(mu_);
  auto next = buffers_.lower_bound(start);
  if (next != buffers_.end() && next->first < start + size) {
    return Status(ErrorCode::INVALID_PARAMS, "buffer overlaps a registered buffer");
  }
  if (next != buffers_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second > start) {
      return Status(ErrorCode::INVALID_PARAMS, "buffer overlaps a registered buffer");
    }
  }
  buffers_.emplace(start, size);
  return Status::Ok();
}

Status BufferRegistry::Unregister(const void* ptr) {
  std::unique_lock lock(mu_);
  if (buffers_.erase(reinterpret_cast<uintptr_t>(ptr)) == 0) {
    return Status(ErrorCode::INVALID_PARAMS, "no buffer registered at this address");
  }
  return Status::Ok();
}

bool BufferRegistry::Contains(const void* ptr, size_t size) const {
  const auto start = reinterpret_cast<uintptr_t>(ptr);
  std::shared_lock lock(mu_);
  auto it = buffers_.upper_bound(start);
  if (it == buffers_.begin()) return false;
  --it;
  return start >= it->first && start + size >= start && start + size <= it->first + it->second;
}

}  // namespace tierkv
