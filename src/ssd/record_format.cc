#include "ssd/record_format.h"

#include <string>

#include "common/checksum.h"

namespace tierkv {
namespace {

// Explicit byte shifts: the format is little-endian whatever the host is.
void Put16(uint8_t* p, uint16_t v) {
  for (int i = 0; i < 2; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void Put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t Get16(const uint8_t* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }
uint32_t Get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t Get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

Status Bad(const char* what, const std::string& detail) {
  return Status(ErrorCode::CHECKSUM_MISMATCH, std::string(what) + ": " + detail);
}

// Checks the fields every header starts with: magic, version, header length, and the
// checksum stored in its last 8 bytes over everything before it.
Status CheckCommon(const char* what, const uint8_t* src, size_t len, uint32_t magic, size_t size) {
  if (len < size) return Bad(what, "truncated (" + std::to_string(len) + " bytes)");
  if (Get32(src) != magic) return Bad(what, "bad magic");
  if (Get16(src + 4) != kDiskFormatVersion) {
    return Bad(what, "unsupported format version " + std::to_string(Get16(src + 4)));
  }
  if (Get16(src + 6) != size) return Bad(what, "bad header length");
  if (Get64(src + size - 8) != Checksum(src, size - 8))
    return Bad(what, "header checksum mismatch");
  return Status::Ok();
}

}  // namespace

void EncodeRegionHeader(const RegionHeader& h, uint8_t* dst) {
  Put32(dst + 0, kRegionMagic);
  Put16(dst + 4, kDiskFormatVersion);
  Put16(dst + 6, kRegionHeaderSize);
  Put32(dst + 8, h.region_index);
  Put32(dst + 12, static_cast<uint32_t>(kBlockSize));
  Put64(dst + 16, h.generation);
  Put64(dst + 24, h.region_size);
  Put64(dst + 32, 0);  // reserved
  Put64(dst + 40, Checksum(dst, 40));
}

void EncodeRecordHeader(const RecordHeader& h, uint8_t* dst) {
  Put32(dst + 0, kRecordMagic);
  Put16(dst + 4, kDiskFormatVersion);
  Put16(dst + 6, kRecordHeaderSize);
  Put32(dst + 8, h.key_size);
  Put32(dst + 12, RecordValueAligned(h.value_size) ? kRecordFlagValueAligned : 0);
  Put64(dst + 16, h.value_size);
  Put64(dst + 24, h.value_checksum);
  Put64(dst + 32, h.generation);
  Put64(dst + 40, h.sequence);
  Put64(dst + 48, h.key_hash);
  Put64(dst + 56, Checksum(dst, 56));
}

Result<RegionHeader> DecodeRegionHeader(const uint8_t* src, size_t len) {
  Status s = CheckCommon("region header", src, len, kRegionMagic, kRegionHeaderSize);
  if (!s.ok()) return s;
  if (Get32(src + 12) != kBlockSize) return Bad("region header", "unsupported block size");
  RegionHeader h;
  h.region_index = Get32(src + 8);
  h.generation = Get64(src + 16);
  h.region_size = Get64(src + 24);
  return h;
}

Result<RecordHeader> DecodeRecordHeader(const uint8_t* src, size_t len) {
  Status s = CheckCommon("record header", src, len, kRecordMagic, kRecordHeaderSize);
  if (!s.ok()) return s;
  const uint32_t flags = Get32(src + 12);
  if ((flags & ~kRecordFlagValueAligned) != 0) return Bad("record header", "unknown flags");
  RecordHeader h;
  h.key_size = Get32(src + 8);
  h.value_size = Get64(src + 16);
  h.value_checksum = Get64(src + 24);
  h.generation = Get64(src + 32);
  h.sequence = Get64(src + 40);
  h.key_hash = Get64(src + 48);
  if (h.key_size == 0) return Bad("record header", "empty key");
  if (((flags & kRecordFlagValueAligned) != 0) != RecordValueAligned(h.value_size)) {
    return Bad("record header", "layout flag does not match the value size");
  }
  return h;
}

uint64_t RecordKeyHash(std::string_view key) { return Checksum(key.data(), key.size()); }

}  // namespace tierkv
