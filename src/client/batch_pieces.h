// The checks and conversions every batch call of the client starts with: pairing pointer and
// size lists into pieces, their total, and the per-key checks of keys and buffers. Private to
// src/client/. Thread-safety: pure functions (CheckBatch reads the registry, itself
// thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "client/buffer_registry.h"
#include "common/key.h"
#include "tierkv/status.h"

namespace tierkv {

// The total size of `pieces`; `overflow` says whether it wrapped around.
template <typename Piece>
uint64_t TotalSize(const std::vector<Piece>& pieces, bool& overflow) {
  uint64_t total = 0;
  overflow = false;
  for (const auto& p : pieces) {
    if (total + p.size < total) overflow = true;
    total += p.size;
  }
  return total;
}

// Pairs ptrs[i][k] with sizes[i][k]. A key whose lists are missing or differ in
// length gets INVALID_PARAMS in `shape` (and no pieces).
template <typename Piece, typename Ptr>
std::vector<std::vector<Piece>> ToPieces(size_t n, const std::vector<std::vector<Ptr>>& ptrs,
                                         const std::vector<std::vector<size_t>>& sizes,
                                         std::vector<int>& shape) {
  std::vector<std::vector<Piece>> pieces(n);
  shape.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (i >= ptrs.size() || i >= sizes.size() || ptrs[i].size() != sizes[i].size()) {
      shape[i] = ToInt(ErrorCode::INVALID_PARAMS);
      continue;
    }
    for (size_t k = 0; k < ptrs[i].size(); ++k) pieces[i].push_back(Piece{ptrs[i][k], sizes[i][k]});
  }
  return pieces;
}

// Per key: 0, or INVALID_KEY (ValidateKey), DUPLICATE_KEY (earlier in the batch),
// INVALID_PARAMS (no pieces, total 0 or overflowing, a null pointer with a size) or, with
// `check_registered`, BUFFER_NOT_REGISTERED (a piece outside every registered buffer).
template <typename Piece>
std::vector<int> CheckBatch(const std::vector<std::string>& keys,
                            const std::vector<std::vector<Piece>>& pieces, bool check_registered,
                            const BufferRegistry& buffers) {
  std::vector<int> codes(keys.size(), 0);
  std::unordered_set<std::string_view> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (Status st = ValidateKey(keys[i]); !st.ok()) {
      codes[i] = ToInt(st.code());
      continue;
    }
    if (!seen.insert(keys[i]).second) {
      codes[i] = ToInt(ErrorCode::DUPLICATE_KEY);
      continue;
    }
    bool overflow = false;
    if (pieces[i].empty() || TotalSize(pieces[i], overflow) == 0 || overflow) {
      codes[i] = ToInt(ErrorCode::INVALID_PARAMS);
      continue;
    }
    for (const auto& p : pieces[i]) {
      if (p.size > 0 && p.ptr == nullptr) {
        codes[i] = ToInt(ErrorCode::INVALID_PARAMS);
        break;
      }
      if (check_registered && p.size > 0 && !buffers.Contains(p.ptr, p.size)) {
        codes[i] = ToInt(ErrorCode::BUFFER_NOT_REGISTERED);
        break;
      }
    }
  }
  return codes;
}

}  // namespace tierkv
