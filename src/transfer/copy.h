// Copy kernels of the in-process data path: scatter/gather memcpy fused with
// the xxh3 checksum, in cache-sized chunks so each byte is hashed while hot.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tierkv {

struct ConstPiece {
  const void* ptr;
  size_t size;
};
struct MutPiece {
  void* ptr;
  size_t size;
};

// Gathers `pieces` into dst (their total size). With `hash`, returns the xxh3
// of the bytes (hashing each source chunk just before copying it), else 0.
uint64_t GatherCopy(uint8_t* dst, const std::vector<ConstPiece>& pieces, bool hash);
// Scatters `src` over `pieces`. With `hash`, returns the xxh3 of the copied
// bytes (each destination chunk is hashed right after it is written), else 0.
uint64_t ScatterCopy(const uint8_t* src, const std::vector<MutPiece>& pieces, bool hash);

}  // namespace tierkv
