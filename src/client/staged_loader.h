// StagedLoader: the requester's half of a staged load from an SSD tier.
//
// Direct loads: a value of at least kAlignedValueMin bytes whose size is a multiple of 4096,
// bound for pieces whose addresses and sizes are multiples of 4096 (SsdTier::DirectReadable),
// is read by the device straight into those pieces (O_DIRECT) and verified there, all of a
// batch's in one SsdTier::ReadDirect call (each object verified as its read completes): no
// staging space and no copy. Everything else is staged as below.
//
// What: given the disk reads of one get batch, asks the owning tier to stage them and copies
// the staged bytes into the caller's buffers, verifying every object against its checksum
// (always, whatever verify_checksum says: disk bytes are never returned unchecked).
//
// Splitting: a batch is cut, in order, into parts whose staging need (StagingNeed(size) per
// object: align_up(size, 4096) + 8192) fits in half of usable_ratio x the tier's staging
// budget and in kStageBatchBytes (ssd/staging_area.h), so two parts can be in flight: the next part
// is staged while the current one is copied out (an object too big for that still gets a part of
// its own up to the whole usable budget). An object whose need exceeds usable_ratio x budget is
// streamed alone, in pieces of the largest length that fits, hashed as it streams and checked at
// the end. A part that fails as a whole (no staging space, IO error) fails exactly its keys; a key
// is reported complete only after all its bytes were copied and verified. Failed keys get their
// destination zeroed.
//
// Thread-safety: Load() may be called concurrently (each call has its own state).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/disk_location.h"
#include "transfer/copy.h"
#include "transfer/transfer_pool.h"

namespace tierkv {

class SsdTier;

struct DiskRead {
  std::shared_ptr<SsdTier> tier;  // the owner's tier holding the record
  const std::string* key = nullptr;
  DiskLocation location;
  uint64_t checksum = 0;      // xxh3-64 of the object (master's record)
  std::vector<MutPiece> dst;  // exactly location.size bytes
  int64_t result = 0;         // out: size, or a negative ErrorCode
};

struct StagedLoadStats {
  uint64_t parts = 0;  // staged parts
  uint64_t streamed_objects = 0;
};

class StagedLoader {
 public:
  // Staging need of one pipelined part: 8 objects of 2 MiB. Enough reads in flight to keep
  // the drive busy while the previous part is copied out, and small enough that the copy of
  // a call's last part (which nothing overlaps) stays short; 8 measured better than 16.

  StagedLoader(double usable_ratio, TransferPool* pool)
      : usable_ratio_(usable_ratio), pool_(pool) {}

  // Loads every read (reads of several tiers are handled tier by tier). Sets each result.
  StagedLoadStats Load(std::vector<DiskRead>& reads) const;

  // Largest staging need one part may take from a budget of `capacity` bytes.
  uint64_t PartBudget(uint64_t capacity) const;

 private:
  void LoadFromTier(SsdTier& tier, std::vector<DiskRead*>& reads, StagedLoadStats& stats) const;
  void LoadDirect(SsdTier& tier, const std::vector<DiskRead*>& reads) const;
  // Streams one object in pieces of `piece` value bytes (0: OBJECT_TOO_LARGE).
  void Stream(SsdTier& tier, DiskRead& read, uint64_t piece) const;

  const double usable_ratio_;
  TransferPool* const pool_;
};

}  // namespace tierkv
