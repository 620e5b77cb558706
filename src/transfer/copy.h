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

// The xxh3-64 of the concatenation of `pieces` (no copy): the checksum of an object whose
// bytes move through a network transport.
uint64_t HashPieces(const std::vector<ConstPiece>& pieces);
uint64_t HashPieces(const std::vector<MutPiece>& pieces);

// Zeroes every piece: a failed read never leaves bytes that could be taken for the object.
void ZeroPieces(const std::vector<MutPiece>& pieces);

class ChecksumStream;
// Copies `len` bytes of `src` to bytes [offset, offset + len) of the concatenation of
// `pieces` (which must be that long), feeding each copied chunk to `sum` when not null:
// an object streamed in order through several calls gets the checksum of the whole.
void ScatterCopyAt(const uint8_t* src, uint64_t len, const std::vector<MutPiece>& pieces,
                   uint64_t offset, ChecksumStream* sum);

}  // namespace tierkv
