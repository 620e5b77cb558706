// Where an object's bytes live in an SSD tier's region log.
//
// Shared by the master (which records disk replicas without reading them) and the SSD tier
// (which writes and reads them); the layout is in docs/disk-format.md.
#pragma once

#include <cstdint>

namespace tierkv {

// `offset` is the record header's byte offset in its region (a multiple of 4096); `size` is
// the value's size in bytes. A location whose region was reused since (another generation)
// reads as OBJECT_NOT_FOUND, never as the new tenant's bytes.
struct DiskLocation {
  uint32_t region = 0;
  uint64_t generation = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
};

}  // namespace tierkv
