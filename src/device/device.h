// Device: the block-IO interface under the SSD tier (see docs/device.md).
//
// What: positional reads and writes of aligned byte ranges on a fixed-size device (a tier
// file opened with O_DIRECT, or memory in tests). Implementations: UringDevice (io_uring),
// PosixDevice (pread/pwrite), MemoryDevice (tests), FaultyDevice (fault injection around
// any Device).
//
// Alignment: offset, len and the buffer address must be multiples of alignment(), len > 0,
// and [offset, offset + len) must lie inside [0, size()). A request that breaks a rule fails
// with INVALID_PARAMS before any IO is issued. The checks live in the non-virtual public
// methods, so every implementation enforces the same contract.
//
// Errors: a failed or short read is FILE_READ_FAIL, a failed or short write FILE_WRITE_FAIL;
// the message names the offset, the byte counts and the errno text. After an error the
// device keeps working: the next request is served normally. After a failed read the
// buffer's bytes are unspecified; after a failed write the device range is.
//
// Ownership: buffers are borrowed for the duration of the call only. A device does not own
// the file descriptor it was opened on unless its class says so (see TierFile).
//
// Thread-safety: all methods may be called concurrently from many threads. Concurrent
// requests on overlapping ranges, with at least one write, leave unspecified bytes (as on a
// real disk); callers order such requests themselves.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tierkv/status.h"

namespace tierkv {

// One request of a batch. For writes `buf` is only read.
struct IoRequest {
  uint64_t offset = 0;
  void* buf = nullptr;
  uint64_t len = 0;
};

// Completion callback of a batch: called once per request, with its index in the batch and
// its final status, as soon as that request is done (so the caller can use its bytes while
// the rest are still in flight). Called on the thread that issued the batch, before the
// batch call returns, in completion order; it must not throw. While it runs no new request is
// submitted; the io_uring device calls it only after refilling its queue with the requests
// waiting, so a callback that takes a while (e.g. hashing the bytes) overlaps the reads in
// flight.
using IoDone = std::function<void(size_t index, const Status& status)>;

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Required alignment of offsets, lengths and buffer addresses (a power of two).
  uint64_t alignment() const { return alignment_; }
  // Usable bytes: valid offsets are [0, size()).
  uint64_t size() const { return size_; }

  // Reads `len` bytes at `offset` into `buf`. INVALID_PARAMS (checked before IO),
  // FILE_READ_FAIL on an IO error or a short read. Thread-safe.
  Status Read(uint64_t offset, void* buf, uint64_t len);
  // Writes `len` bytes of `buf` at `offset`. INVALID_PARAMS (checked before IO),
  // FILE_WRITE_FAIL on an IO error (EIO, ENOSPC, ...) or a short write. Thread-safe.
  Status Write(uint64_t offset, const void* buf, uint64_t len);

  // One Status per request, in order; a bad or failed request never fails its neighbours.
  // Implementations may keep several requests in flight and complete them in any order.
  // `on_done` (optional) is told of each request as it completes (see IoDone); a request
  // that fails the contract checks is reported before any IO is issued. Thread-safe.
  std::vector<Status> ReadBatch(const std::vector<IoRequest>& requests,
                                const IoDone& on_done = nullptr);
  std::vector<Status> WriteBatch(const std::vector<IoRequest>& requests,
                                 const IoDone& on_done = nullptr);

  // The checks of the contract above: INVALID_PARAMS naming the broken rule, or OK.
  Status ValidateRequest(uint64_t offset, const void* buf, uint64_t len) const;

 protected:
  // `alignment` must be a power of two and `size` a multiple of it.
  Device(uint64_t size, uint64_t alignment) : size_(size), alignment_(alignment) {}

  // The IO itself, called only with requests that passed ValidateRequest.
  virtual Status DoRead(uint64_t offset, void* buf, uint64_t len) = 0;
  virtual Status DoWrite(uint64_t offset, const void* buf, uint64_t len) = 0;
  // Default: one DoRead/DoWrite after the other. Returns one Status per request and calls
  // `on_done` (may be null) once per request as it completes.
  virtual std::vector<Status> DoReadBatch(const std::vector<IoRequest>& requests,
                                          const IoDone& on_done);
  virtual std::vector<Status> DoWriteBatch(const std::vector<IoRequest>& requests,
                                           const IoDone& on_done);

 private:
  std::vector<Status> Batch(const std::vector<IoRequest>& requests, bool write,
                            const IoDone& on_done);

  const uint64_t size_;
  const uint64_t alignment_;
};

// Which engine OpenDevice uses.
enum class DeviceEngine {
  kAuto,   // io_uring; PosixDevice (logged at warn level, with the reason) if it is unavailable
  kUring,  // io_uring or an error
  kPosix,  // pread/pwrite
};

struct DeviceOptions {
  DeviceEngine engine = DeviceEngine::kAuto;
  // io_uring: requests in flight per ring, and rings per device (concurrent callers each
  // take a free ring, so this bounds how many batches run in parallel).
  uint32_t queue_depth = 32;
  uint32_t num_rings = 4;
  // io_uring: bytes a batch keeps in flight at most (one request always goes, whatever its
  // size); 0 = only queue_depth bounds it. See UringDeviceOptions.
  uint64_t max_inflight_bytes = uint64_t{16} << 20;
  // Test hook: make io_uring setup fail as if io_uring were disabled (tests the fallback).
  bool TEST_fail_uring_setup = false;
};

class TierFile;

// Opens a device on `fd` (borrowed: it must stay open while the device lives) of `size`
// bytes. INVALID_PARAMS for a bad size/alignment/option; with kUring, the io_uring setup
// error. Thread-safe.
Result<std::unique_ptr<Device>> OpenDevice(int fd, uint64_t size, uint64_t alignment,
                                           const DeviceOptions& options);
// Same, on a tier file's fd, capacity and alignment. `file` must outlive the device.
Result<std::unique_ptr<Device>> OpenDevice(const TierFile& file, const DeviceOptions& options);

// For implementations' factories: INVALID_PARAMS unless `alignment` is a power of two and
// `size` a positive multiple of it.
Status ValidateGeometry(uint64_t size, uint64_t alignment);

// "read" or "write" error text shared by the implementations: "<op> of <len> bytes at offset
// <offset> failed: <what>".
Status IoError(bool write, uint64_t offset, uint64_t len, const std::string& what);
// A short transfer: "<op> at offset <offset>: transferred <done> of <len> bytes".
Status ShortIoError(bool write, uint64_t offset, uint64_t done, uint64_t len);

}  // namespace tierkv
