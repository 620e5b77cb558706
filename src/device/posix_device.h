// PosixDevice: the pread/pwrite engine, the fallback when io_uring is unavailable.
//
// What: a Device on a borrowed fd; each request is one pread/pwrite loop (EINTR retried,
// partial transfers continued; a transfer of 0 bytes before the end is a short-IO error).
// Batches run one request after the other (no IO parallelism within a batch).
// Errors: INVALID_PARAMS (Device contract), FILE_READ_FAIL / FILE_WRITE_FAIL with strerror.
// Ownership: the fd is borrowed and must stay open while the device lives.
// Thread-safety: fully thread-safe; pread/pwrite need no shared state.
#pragma once

#include <cstdint>
#include <memory>

#include "device/device.h"

namespace tierkv {

class PosixDevice final : public Device {
 public:
  // INVALID_PARAMS for a negative fd, a non-power-of-two alignment, or a size that is not a
  // positive multiple of the alignment.
  static Result<std::unique_ptr<PosixDevice>> Open(int fd, uint64_t size, uint64_t alignment);

  int fd() const { return fd_; }

 protected:
  Status DoRead(uint64_t offset, void* buf, uint64_t len) override;
  Status DoWrite(uint64_t offset, const void* buf, uint64_t len) override;

 private:
  PosixDevice(int fd, uint64_t size, uint64_t alignment) : Device(size, alignment), fd_(fd) {}

  const int fd_;
};

}  // namespace tierkv
