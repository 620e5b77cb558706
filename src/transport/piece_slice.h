// What the TCP and UCX segment clients share: their window of requests in flight, deadlines in
// poll()'s milliseconds, and ranges of a scatter/gather list. Private to src/transport/.
// Thread-safety: stateless.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "transfer/copy.h"

namespace tierkv::transport {

// Requests in flight per batch, and the bytes they may move at once (at least one request is
// always in flight, however large). 128 x 256 KiB ranges moved ~10% faster than 32 over loopback.
inline constexpr size_t kMaxInFlight = 128;
inline constexpr uint64_t kMaxInFlightBytes = uint64_t{64} << 20;

// Milliseconds from now until `deadline`, clamped to [0, INT_MAX] (poll's timeout).
inline int MillisUntil(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now())
          .count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, std::numeric_limits<int>::max()));
}

// Bytes [from, from + length) of the concatenation of `pieces`, as pieces.
template <typename Piece>
std::vector<Piece> Slice(const std::vector<Piece>& pieces, uint64_t from, uint64_t length) {
  using Byte = std::conditional_t<std::is_same_v<Piece, ConstPiece>, const uint8_t, uint8_t>;
  std::vector<Piece> out;
  uint64_t begin = 0;
  for (const Piece& piece : pieces) {
    const uint64_t end = begin + piece.size;
    const uint64_t lo = std::max(begin, from);
    const uint64_t hi = std::min(end, from + length);
    if (lo < hi) out.push_back(Piece{static_cast<Byte*>(piece.ptr) + (lo - begin), hi - lo});
    begin = end;
    if (begin >= from + length) break;
  }
  return out;
}

}  // namespace tierkv::transport
