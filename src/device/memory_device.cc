#include "device/memory_device.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>

namespace tierkv {

Result<std::unique_ptr<MemoryDevice>> MemoryDevice::Create(uint64_t size, uint64_t alignment) {
  Status status = ValidateGeometry(size, alignment);
  if (!status.ok()) return status;
  const size_t align = alignment < sizeof(void*) ? sizeof(void*) : alignment;
  // aligned_alloc wants a size that is a multiple of the alignment.
  void* raw = std::aligned_alloc(align, (size + align - 1) / align * align);
  if (raw == nullptr) {
    return Status(ErrorCode::INTERNAL_ERROR,
                  "memory device: cannot allocate " + std::to_string(size) + " bytes");
  }
  std::memset(raw, 0, size);
  return std::unique_ptr<MemoryDevice>(new MemoryDevice(
      size, alignment, std::unique_ptr<uint8_t, Free>(static_cast<uint8_t*>(raw))));
}

Status MemoryDevice::DoRead(uint64_t offset, void* buf, uint64_t len) {
  std::shared_lock lock(mu_);
  std::memcpy(buf, data_.get() + offset, len);
  return Status::Ok();
}

Status MemoryDevice::DoWrite(uint64_t offset, const void* buf, uint64_t len) {
  std::unique_lock lock(mu_);
  std::memcpy(data_.get() + offset, buf, len);
  return Status::Ok();
}

}  // namespace tierkv
