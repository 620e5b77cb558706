// Byte units for the tests (one definition: the test binaries are built as unity sources in CI,
// where two files' own kMiB would collide).
#pragma once

#include <cstdint>

namespace tierkv {

inline constexpr uint64_t kKiB = uint64_t{1} << 10;
inline constexpr uint64_t kMiB = uint64_t{1} << 20;
inline constexpr uint64_t kGiB = uint64_t{1} << 30;

}  // namespace tierkv
