// On-disk format of the SSD tier's region log: region headers and record headers.
//
// What: fixed-layout, little-endian encode/decode of the two headers described in
// docs/disk-format.md, plus the size arithmetic of a record (header, key, value, padding to
// the next kBlockSize boundary). Decoding validates magic, format version, header length, the
// layout flag and the header's own xxh3-64 checksum, so zeroed space, another tenant's garbage or a
// torn header is recognised here; the key and value bytes are checked by the caller (key hash and
// value checksum are fields of the record header).
//
// Errors: Decode* return CHECKSUM_MISMATCH naming the failed check ("bad magic", "header
// checksum mismatch", ...). Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "tierkv/status.h"

namespace tierkv {

// Records start on, and are padded to, multiples of this (the tier file's O_DIRECT alignment).
inline constexpr uint64_t kBlockSize = 4096;
// 2: values of kAlignedValueMin bytes or more start on a block boundary (flag bit 0). Version 1
// files are not read (their regions are skipped, with a warning, at warm restart).
inline constexpr uint16_t kDiskFormatVersion = 2;
// Little-endian u32 of the ASCII bytes "TKRG" / "TKRC" as they appear on disk.
inline constexpr uint32_t kRegionMagic = 0x4752'4B54;
inline constexpr uint32_t kRecordMagic = 0x4352'4B54;
inline constexpr size_t kRegionHeaderSize = 48;  // encoded bytes; the header owns block 0
inline constexpr size_t kRecordHeaderSize = 64;
// Records of a region start after its header block.
inline constexpr uint64_t kFirstRecordOffset = kBlockSize;

struct RegionHeader {
  uint32_t region_index = 0;
  uint64_t generation = 0;  // log-wide, strictly increasing at every region (re)open
  uint64_t region_size = 0;
};

struct RecordHeader {
  uint32_t key_size = 0;
  uint64_t value_size = 0;
  uint64_t value_checksum = 0;  // xxh3-64 of the value bytes (same as the object checksum)
  uint64_t generation = 0;      // the region's generation when the record was appended
  uint64_t sequence = 0;        // index of the record in its region (0, 1, ...)
  uint64_t key_hash = 0;        // xxh3-64 of the key bytes
};

// Writes kRegionHeaderSize / kRecordHeaderSize bytes at `dst`.
void EncodeRegionHeader(const RegionHeader& header, uint8_t* dst);
void EncodeRecordHeader(const RecordHeader& header, uint8_t* dst);

// Decode from `len` readable bytes at `src` (fewer than the header size is an error).
Result<RegionHeader> DecodeRegionHeader(const uint8_t* src, size_t len);
Result<RecordHeader> DecodeRecordHeader(const uint8_t* src, size_t len);

uint64_t RecordKeyHash(std::string_view key);

inline uint64_t AlignUpToBlock(uint64_t n) { return (n + kBlockSize - 1) & ~(kBlockSize - 1); }
// Values of at least this many bytes start on a block boundary of their own (header and key
// fill the blocks before it, padded), so a block-aligned caller buffer can receive them with
// O_DIRECT straight from the device, without a staging copy. Smaller values follow the key
// directly, so a small record stays one block. The layout is a function of the value size
// alone (DiskLocation does not carry it); the record header's flag bit 0 repeats it.
inline constexpr uint64_t kAlignedValueMin = uint64_t{64} << 10;
inline constexpr uint32_t kRecordFlagValueAligned = 1;
inline bool RecordValueAligned(uint64_t value_size) { return value_size >= kAlignedValueMin; }
// Offset of the first value byte from the record start.
inline uint64_t RecordValueOffset(uint64_t key_size, uint64_t value_size) {
  const uint64_t packed = kRecordHeaderSize + key_size;
  return RecordValueAligned(value_size) ? AlignUpToBlock(packed) : packed;
}
// Bytes a record occupies in its region: header, key, (padding,) value, rounded up to
// kBlockSize. The caller keeps the sizes small enough not to overflow (key <= 4 KiB, value <=
// region).
inline uint64_t RecordSpan(uint64_t key_size, uint64_t value_size) {
  return AlignUpToBlock(RecordValueOffset(key_size, value_size) + value_size);
}

}  // namespace tierkv
