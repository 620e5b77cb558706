// LocalTierMover: the tier mover of a segment whose SSD tier lives in this process.
//
// The master calls Demote() with memory ranges of `segment`; they are appended to `tier`'s
// region log (copied into the open region buffer, flushed when it fills), with the checksum the
// master recorded at PutEnd (not recomputed). Every Store uses it: an in-process master calls it
// directly, a remote one through the TierMoves stream (rpc/segment_link.h).
// Thread-safety: thread-safe (the tier serializes appends).
#pragma once

#include <atomic>
#include <cstdint>
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
  // Demote calls so far (one per request of a remote master).
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> requests_{0};
  const std::shared_ptr<MemorySegment> segment_;
  const std::shared_ptr<SsdTier> tier_;
};

}  // namespace tierkv
