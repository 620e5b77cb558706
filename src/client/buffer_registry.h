// Registered buffers of a client: the ranges batch transfers may use.
// Thread-safety: thread-safe (shared lock for lookups).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <shared_mutex>

#include "tierkv/status.h"

namespace tierkv {

class BufferRegistry {
 public:
  // INVALID_PARAMS for a null pointer, size 0, or overlap with a registration.
  Status Register(const void* ptr, size_t size);
  // INVALID_PARAMS unless `ptr` is the start of a registered buffer.
  Status Unregister(const void* ptr);
  // Whether [ptr, ptr+size) lies inside one registered buffer.
  bool Contains(const void* ptr, size_t size) const;

 private:
  mutable std::shared_mutex mu_;
  std::map<uintptr_t, size_t> buffers_;  // start -> size, guarded by mu_
};

}  // namespace tierkv
