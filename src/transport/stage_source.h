// StageSource: what a segment server asks to answer stage requests — staged loads from the SSD
// tier behind its segment (docs/ucx-transport.md, "Staged loads"). The server only moves bytes:
// which ranges are read together, on which threads, and when staging space is reclaimed is the
// source's policy (the store's TierStager, store/tier_stager.h).
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "common/disk_location.h"
#include "tierkv/status.h"

namespace tierkv::transport {

// One value range of a disk record: bytes [value_offset, value_offset + length) of the object
// stored under `key` at `location`.
struct StageRange {
  std::string key;
  DiskLocation location;
  uint64_t value_offset = 0;
  uint64_t length = 0;
};

// A staged range: its bytes in the staging buffer (length bytes at `data`), valid while a copy
// of `hold` lives — dropping the last one releases the staging space. On failure only `status`.
struct StagedRange {
  Status status;
  const uint8_t* data = nullptr;
  std::shared_ptr<const void> hold;
};

using StageDone = std::function<void(StagedRange)>;

class StageSource {
 public:
  virtual ~StageSource() = default;
  // The staging buffer's size: requesters split their loads so that each range fits.
  virtual uint64_t staging_capacity() const = 0;
  // Queues `range`; `done` is called exactly once, on a thread of the source (never inside
  // Submit), with the staged bytes or the range's error.
  virtual void Submit(StageRange range, StageDone done) = 0;
  // Fails every range queued and not yet being read with `why` (their `done` is called): the
  // server is stopping. Ranges submitted later are staged as usual.
  virtual void FailQueued(const Status& why) = 0;
};

}  // namespace tierkv::transport
