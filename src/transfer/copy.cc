#include "transfer/copy.h"

#include <algorithm>
#include <cstring>

#include "common/checksum.h"

namespace tierkv {
namespace {
// Small enough to stay in L2 between the copy and the hash.
constexpr size_t kChunk = 128 * 1024;
}  // namespace

uint64_t GatherCopy(uint8_t* dst, const std::vector<ConstPiece>& pieces, bool hash) {
  if (!hash) {
    for (const auto& p : pieces) {
      std::memcpy(dst, p.ptr, p.size);
      dst += p.size;
    }
    return 0;
  }
  ChecksumStream sum;
  for (const auto& p : pieces) {
    const auto* src = static_cast<const uint8_t*>(p.ptr);
    for (size_t off = 0; off < p.size; off += kChunk) {
      const size_t len = std::min(kChunk, p.size - off);
      sum.Update(src + off, len);
      std::memcpy(dst, src + off, len);
      dst += len;
    }
  }
  return sum.Digest();
}

uint64_t ScatterCopy(const uint8_t* src, const std::vector<MutPiece>& pieces, bool hash) {
  if (!hash) {
    for (const auto& p : pieces) {
      std::memcpy(p.ptr, src, p.size);
      src += p.size;
    }
    return 0;
  }
  ChecksumStream sum;
  for (const auto& p : pieces) {
    auto* dst = static_cast<uint8_t*>(p.ptr);
    for (size_t off = 0; off < p.size; off += kChunk) {
      const size_t len = std::min(kChunk, p.size - off);
      std::memcpy(dst + off, src, len);
      sum.Update(dst + off, len);
      src += len;
    }
  }
  return sum.Digest();
}

}  // namespace tierkv
