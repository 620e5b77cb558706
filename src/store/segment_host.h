// SegmentHost: where a Store mounts the segment it contributes — the master that places
// replicas on it (in this process or remote) and the rest of this process, which then reaches
// the segment's bytes and its SSD tier directly (no transport).
//
// Implemented by the client's backends (client/in_process_backend.h, rpc/remote_backend.h).
// Thread-safety: all methods are thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "master/master_api.h"
#include "master/tier_mover.h"
#include "memory/memory_segment.h"
#include "ssd/ssd_tier.h"

namespace tierkv {

// The SSD tier a store puts behind its segment.
struct OwnTier {
  std::shared_ptr<SsdTier> tier;     // null: no tier
  std::shared_ptr<TierMover> mover;  // writes the master's demotions into it
  bool write_behind = false;         // offload_write_policy write_behind
};

class SegmentHost {
 public:
  virtual ~SegmentHost() = default;

  // The master the segment is mounted on; the store's disk-replica bookkeeping goes here too.
  virtual MasterApi& master() = 0;
  // True when other processes reach the segment (a remote master places their replicas on
  // it): the store must serve it (shared memory, network) and name its endpoints in the
  // mounted name.
  virtual bool serves_other_processes() const = 0;

  // Mounts `segment` on the master under `mounted_name` (publishing its memory to this process
  // first) with the SSD tier `tier` behind it (empty: none): this process reads the segment's
  // disk replicas from tier.tier, and the master demotes into it through tier.mover (and, with
  // tier.write_behind, copies every put on the segment there after its PutEnd). A remote master
  // also links the segment's index stream first (the store's index of the segment, reported to
  // every new master: restart recovery); the segment is placeable once that is done. The id to
  // pass below. Errors: the master's MountSegment; RPC_FAIL when a remote master does not take
  // the segment's stream within 5 s.
  virtual Result<SegmentId> MountOwn(std::shared_ptr<MemorySegment> segment,
                                     const std::string& mounted_name, OwnTier tier) = 0;
  // The segment's SSD tier reused `region`: the master (and this process's index of the
  // segment) drop the disk replicas of `keys` that point into it at `generation`. Called
  // before the region is written again.
  virtual void DropOwnDiskReplicas(SegmentId id, uint32_t region, uint64_t generation,
                                   const std::vector<std::string>& keys) = 0;
  // Detaches the tier (no more demotions into it) and unmounts the segment, dropping its
  // replicas. Errors: the master's UnmountSegment (the local state is dropped regardless).
  virtual Status UnmountOwn(SegmentId id) = 0;
};

}  // namespace tierkv
