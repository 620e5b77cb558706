#include "device/device.h"

#include <spdlog/spdlog.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "device/posix_device.h"
#include "device/tier_file.h"
#include "device/uring_device.h"

namespace tierkv {

Status IoError(bool write, uint64_t offset, uint64_t len, const std::string& what) {
  return Status(write ? ErrorCode::FILE_WRITE_FAIL : ErrorCode::FILE_READ_FAIL,
                std::string(write ? "write" : "read") + " of " + std::to_string(len) +
                    " bytes at offset " + std::to_string(offset) + " failed: " + what);
}

Status ShortIoError(bool write, uint64_t offset, uint64_t done, uint64_t len) {
  return Status(write ? ErrorCode::FILE_WRITE_FAIL : ErrorCode::FILE_READ_FAIL,
                std::string(write ? "short write" : "short read") + " at offset " +
                    std::to_string(offset) + ": transferred " + std::to_string(done) + " of " +
                    std::to_string(len) + " bytes");
}

Status ValidateGeometry(uint64_t size, uint64_t alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "alignment " + std::to_string(alignment) + " is not a power of two");
  }
  if (size == 0 || size % alignment != 0) {
    return Status(ErrorCode::INVALID_PARAMS, "device size " + std::to_string(size) +
                                                 " is not a positive multiple of " +
                                                 std::to_string(alignment));
  }
  return Status::Ok();
}

Status Device::ValidateRequest(uint64_t offset, const void* buf, uint64_t len) const {
  const uint64_t mask = alignment_ - 1;
  if (len == 0) return Status(ErrorCode::INVALID_PARAMS, "IO length must be positive");
  if (buf == nullptr) return Status(ErrorCode::INVALID_PARAMS, "IO buffer is null");
  if ((offset & mask) != 0 || (len & mask) != 0 || (reinterpret_cast<uintptr_t>(buf) & mask) != 0) {
    return Status(ErrorCode::INVALID_PARAMS, "IO not aligned to " + std::to_string(alignment_) +
                                                 " bytes: offset " + std::to_string(offset) +
                                                 ", len " + std::to_string(len) + ", buffer " +
                                                 std::to_string(reinterpret_cast<uintptr_t>(buf)));
  }
  if (offset > size_ || len > size_ - offset) {
    return Status(ErrorCode::INVALID_PARAMS, "IO [" + std::to_string(offset) + ", +" +
                                                 std::to_string(len) + ") outside the device of " +
                                                 std::to_string(size_) + " bytes");
  }
  return Status::Ok();
}

Status Device::Read(uint64_t offset, void* buf, uint64_t len) {
  Status status = ValidateRequest(offset, buf, len);
  if (!status.ok()) return status;
  return DoRead(offset, buf, len);
}

Status Device::Write(uint64_t offset, const void* buf, uint64_t len) {
  Status status = ValidateRequest(offset, buf, len);
  if (!status.ok()) return status;
  return DoWrite(offset, buf, len);
}

std::vector<Status> Device::ReadBatch(const std::vector<IoRequest>& requests,
                                      const IoDone& on_done) {
  return Batch(requests, /*write=*/false, on_done);
}

std::vector<Status> Device::WriteBatch(const std::vector<IoRequest>& requests,
                                       const IoDone& on_done) {
  return Batch(requests, /*write=*/true, on_done);
}

std::vector<Status> Device::Batch(const std::vector<IoRequest>& requests, bool write,
                                  const IoDone& on_done) {
  std::vector<Status> results(requests.size());
  std::vector<IoRequest> valid;
  std::vector<size_t> valid_index;
  valid.reserve(requests.size());
  valid_index.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const IoRequest& r = requests[i];
    results[i] = ValidateRequest(r.offset, r.buf, r.len);
    if (results[i].ok()) {
      valid.push_back(r);
      valid_index.push_back(i);
    } else if (on_done) {
      on_done(i, results[i]);
    }
  }
  if (valid.empty()) return results;
  // Completions of the valid requests are reported under their index in `requests`.
  std::vector<bool> reported(valid.size(), false);
  IoDone inner;
  if (on_done) {
    inner = [&](size_t k, const Status& status) {
      if (k >= valid.size() || reported[k]) return;
      reported[k] = true;
      on_done(valid_index[k], status);
    };
  }
  std::vector<Status> done = write ? DoWriteBatch(valid, inner) : DoReadBatch(valid, inner);
  for (size_t i = 0; i < valid.size(); ++i) {
    results[valid_index[i]] =
        i < done.size() ? std::move(done[i])
                        : Status(ErrorCode::INTERNAL_ERROR, "device returned too few results");
    // An implementation that did not report a request: report it now, with its result.
    if (on_done && !reported[i]) on_done(valid_index[i], results[valid_index[i]]);
  }
  return results;
}

std::vector<Status> Device::DoReadBatch(const std::vector<IoRequest>& requests,
                                        const IoDone& on_done) {
  std::vector<Status> results;
  results.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    results.push_back(DoRead(requests[i].offset, requests[i].buf, requests[i].len));
    if (on_done) on_done(i, results.back());
  }
  return results;
}

std::vector<Status> Device::DoWriteBatch(const std::vector<IoRequest>& requests,
                                         const IoDone& on_done) {
  std::vector<Status> results;
  results.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    results.push_back(DoWrite(requests[i].offset, requests[i].buf, requests[i].len));
    if (on_done) on_done(i, results.back());
  }
  return results;
}

Result<std::unique_ptr<Device>> OpenDevice(int fd, uint64_t size, uint64_t alignment,
                                           const DeviceOptions& options) {
  if (options.engine != DeviceEngine::kPosix) {
    UringDeviceOptions uring_options;
    uring_options.queue_depth = options.queue_depth;
    uring_options.num_rings = options.num_rings;
    uring_options.max_inflight_bytes = options.max_inflight_bytes;
    uring_options.TEST_fail_setup = options.TEST_fail_uring_setup;
    Result<std::unique_ptr<UringDevice>> uring =
        UringDevice::Open(fd, size, alignment, uring_options);
    if (uring.ok()) return std::unique_ptr<Device>(std::move(uring).value());
    // Bad arguments are the caller's bug, not a reason to fall back.
    if (options.engine == DeviceEngine::kUring || uring.code() == ErrorCode::INVALID_PARAMS) {
      return uring.status();
    }
    spdlog::warn("io_uring unavailable ({}); using pread/pwrite for fd {}",
                 uring.status().message(), fd);
  }
  Result<std::unique_ptr<PosixDevice>> posix = PosixDevice::Open(fd, size, alignment);
  if (!posix.ok()) return posix.status();
  return std::unique_ptr<Device>(std::move(posix).value());
}

Result<std::unique_ptr<Device>> OpenDevice(const TierFile& file, const DeviceOptions& options) {
  return OpenDevice(file.fd(), file.capacity(), file.alignment(), options);
}

}  // namespace tierkv
