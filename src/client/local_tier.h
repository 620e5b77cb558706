// LocalTierMover: the tier mover of a segment whose SSD tier lives in this process.
//
// The master calls Demote() with memory ranges of `segment`; they are appended to `tier`'s
// region log (copied into the open region buffer, flushed when it fills), with the checksum the
// master recorded at PutEnd (not recomputed). Embedded mode and
// the store process use it; the master reaches a remote owner's mover over RPC instead.
// Thread-safety: thread-safe (the tier serializes appends).
#pragma once

#include <memory>
#include <vector>

#include "master/tier_mover.h"
#include "memory/memory_segment.h"
#include "ssd/ssd_tier.h"

namespace tierkv {

class LocalTierMover final : public TierMover {
 public:
  LocalTierMover(std::shared_ptr<MemorySegment> segment, std::shared_ptr<SsdTier> tier)
      : segment_(std::move(segment)), tier_(std::move(tier)) {}
  std::vector<Result<DiskLocation>> Demote(const std::vector<DemoteItem>& items) override;

 private:
  const std::shared_ptr<MemorySegment> segment_;
  const std::shared_ptr<SsdTier> tier_;
};

}  // namespace tierkv
