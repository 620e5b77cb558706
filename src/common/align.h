// Rounding to an alignment. Thread-safety: stateless.
#pragma once

#include <cstdint>

namespace tierkv {

// `value` rounded up to a multiple of `align`, a power of two.
inline uint64_t RoundUp(uint64_t value, uint64_t align) {
  return (value + align - 1) & ~(align - 1);
}

}  // namespace tierkv
