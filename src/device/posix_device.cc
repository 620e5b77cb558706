#include "device/posix_device.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

namespace tierkv {
namespace {

// Linux transfers at most this much per call (MAX_RW_COUNT); larger calls return short.
constexpr uint64_t kMaxChunk = uint64_t{1} << 30;

}  // namespace

Result<std::unique_ptr<PosixDevice>> PosixDevice::Open(int fd, uint64_t size, uint64_t alignment) {
  if (fd < 0) return Status(ErrorCode::INVALID_PARAMS, "bad file descriptor " + std::to_string(fd));
  Status status = ValidateGeometry(size, alignment);
  if (!status.ok()) return status;
  return std::unique_ptr<PosixDevice>(new PosixDevice(fd, size, alignment));
}

Status PosixDevice::DoRead(uint64_t offset, void* buf, uint64_t len) {
  auto* bytes = static_cast<uint8_t*>(buf);
  uint64_t done = 0;
  while (done < len) {
    const uint64_t chunk = std::min(len - done, kMaxChunk);
    const ssize_t n = pread(fd_, bytes + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(/*write=*/false, offset, len, std::strerror(errno));
    }
    if (n == 0) return ShortIoError(/*write=*/false, offset, done, len);
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status PosixDevice::DoWrite(uint64_t offset, const void* buf, uint64_t len) {
  const auto* bytes = static_cast<const uint8_t*>(buf);
  uint64_t done = 0;
  while (done < len) {
    const uint64_t chunk = std::min(len - done, kMaxChunk);
    const ssize_t n = pwrite(fd_, bytes + done, chunk, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return IoError(/*write=*/true, offset, len, std::strerror(errno));
    }
    if (n == 0) return ShortIoError(/*write=*/true, offset, done, len);
    done += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

}  // namespace tierkv
