// TierMover: how the master orders a segment's owner to move objects to its SSD tier.
//
// The master never touches object bytes. When it evicts from a segment whose owner has an
// SSD tier, or copies objects there ahead of time (write-behind), it hands the owner the
// objects' memory ranges; the owner writes them to its tier and answers with their disk
// locations. Embedded mode implements this in-process; a store process implements it
// behind RPC. Thread-safety: Demote may be called from several threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/disk_location.h"
#include "tierkv/status.h"

namespace tierkv {

struct DemoteItem {
  std::string key;
  uint64_t offset = 0;  // of the object's memory replica in the owner's segment
  uint64_t size = 0;
  uint64_t checksum = 0;  // xxh3-64 of the object, as recorded at PutEnd
};

class TierMover {
 public:
  virtual ~TierMover() = default;
  // Writes every item's bytes to the SSD tier; one result per item, in order. The master
  // keeps each range allocated (and its object unchanged) until this returns.
  virtual std::vector<Result<DiskLocation>> Demote(const std::vector<DemoteItem>& items) = 0;
};

}  // namespace tierkv
