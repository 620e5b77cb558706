// Fixed-width values copied to and from byte buffers at an offset, in host byte order (the
// wire and disk formats are little-endian; their encoders assert that the host is too).
// memcpy, so the offset needs no alignment. Thread-safety: stateless.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tierkv {

template <typename T>
T LoadAt(const uint8_t* data, size_t offset) {
  T value;
  std::memcpy(&value, data + offset, sizeof(value));
  return value;
}

template <typename T>
void StoreAt(uint8_t* data, size_t offset, T value) {
  std::memcpy(data + offset, &value, sizeof(value));
}

}  // namespace tierkv
