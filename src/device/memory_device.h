// MemoryDevice: a Device backed by an aligned heap buffer, for tests.
//
// What: the full Device contract (same alignment and range rules as a file device) without a
// file; bytes start zeroed. Errors: INVALID_PARAMS only; IO never fails (wrap it in a
// FaultyDevice to inject failures). Ownership: owns its memory.
// Thread-safety: thread-safe; a reader/writer lock makes concurrent overlapping requests
// race-free (each request is atomic with respect to writes), which a real disk does not promise.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <shared_mutex>

#include "device/device.h"

namespace tierkv {

class MemoryDevice final : public Device {
 public:
  // INVALID_PARAMS unless `alignment` is a power of two and `size` a positive multiple of it;
  // INTERNAL_ERROR when the memory cannot be allocated.
  static Result<std::unique_ptr<MemoryDevice>> Create(uint64_t size, uint64_t alignment = 4096);

  // The raw bytes, for tests that check what reached the "disk". Not synchronised.
  uint8_t* TEST_data() { return data_.get(); }

 protected:
  Status DoRead(uint64_t offset, void* buf, uint64_t len) override;
  Status DoWrite(uint64_t offset, const void* buf, uint64_t len) override;

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  MemoryDevice(uint64_t size, uint64_t alignment, std::unique_ptr<uint8_t, Free> data)
      : Device(size, alignment), data_(std::move(data)) {}

  std::shared_mutex mu_;  // shared for reads, exclusive for writes
  std::unique_ptr<uint8_t, Free> data_;
};

}  // namespace tierkv
