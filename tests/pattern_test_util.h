// Deterministic test bytes, shared by the unit, stress and integration tests.
//
// Pattern/PatternBytes: a stream of bytes that differs per seed, so a read of the wrong object
// (or of stale bytes) is caught by comparing with the pattern it was written from.
// PatternByte: the byte at an offset, a function of the offset alone, so that a forked or
// re-executed process and the test agree on any byte of a segment without sharing a buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tierkv::test_util {

// Fills dst[0, n) with the pattern of `seed` (a linear congruential stream, top byte of each
// step).
inline void FillPattern(uint8_t* dst, size_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 12345;
  for (size_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    dst[i] = static_cast<uint8_t>(x >> 24);
  }
}

// `n` bytes of the pattern of `seed`.
inline std::string Pattern(size_t n, uint32_t seed) {
  std::string s(n, '\0');
  FillPattern(reinterpret_cast<uint8_t*>(s.data()), n, seed);
  return s;
}

// The same bytes as Pattern(n, seed), as a byte vector.
inline std::vector<uint8_t> PatternBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  FillPattern(v.data(), n, seed);
  return v;
}

// The byte at offset `i` of the position pattern of `seed`.
inline uint8_t PatternByte(uint64_t i, uint8_t seed) {
  return static_cast<uint8_t>((i * 131 + seed) ^ (i >> 12));
}

}  // namespace tierkv::test_util
