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

void ScatterCopyAt(const uint8_t* src, uint64_t len, const std::vector<MutPiece>& pieces,
                   uint64_t offset, ChecksumStream* sum) {
  for (const auto& p : pieces) {
    if (len == 0) break;
    if (offset >= p.size) {
      offset -= p.size;
      continue;
    }
    auto* dst = static_cast<uint8_t*>(p.ptr) + offset;
    const uint64_t n = std::min<uint64_t>(len, p.size - offset);
    for (uint64_t off = 0; off < n; off += kChunk) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(kChunk, n - off));
      std::memcpy(dst + off, src + off, chunk);
      if (sum != nullptr) sum->Update(dst + off, chunk);
    }
    src += n;
    len -= n;
    offset = 0;
  }
}

uint64_t HashPieces(const std::vector<ConstPiece>& pieces) {
  ChecksumStream sum;
  for (const ConstPiece& p : pieces) sum.Update(p.ptr, p.size);
  return sum.Digest();
}

uint64_t HashPieces(const std::vector<MutPiece>& pieces) {
  ChecksumStream sum;
  for (const MutPiece& p : pieces) sum.Update(p.ptr, p.size);
  return sum.Digest();
}

void ZeroPieces(const std::vector<MutPiece>& pieces) {
  for (const MutPiece& p : pieces) std::memset(p.ptr, 0, p.size);
}

}  // namespace tierkv
