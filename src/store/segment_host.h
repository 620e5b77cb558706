// SegmentHost: where a Store mounts the segment it contributes — the master that places
// replicas on it (in this process or remote) and the rest of this process, which then reaches
// the segment's bytes and its SSD tier directly (no transport).
//
// Implemented by the client's backends (client/in_process_backend.h, rpc/remote_backend.h).
// Thread-safety: all methods are thread-safe.
#pragma once

#include <memory>
#include <string>

#include "master/master_api.h"
#include "master/tier_mover.h"
#include "memory/memory_segment.h"
#include "ssd/ssd_tier.h"

namespace tierkv {

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
  // first); the id to pass below. Errors: the master's MountSegment.
  virtual Result<SegmentId> MountOwn(std::shared_ptr<MemorySegment> segment,
                                     const std::string& mounted_name) = 0;
  // Gives the mounted segment `id` its SSD tier: this process reads the segment's disk replicas
  // from `tier`, and the master demotes into it through `mover` (and, with `write_behind`,
  // copies every put on the segment there after its PutEnd). RPC_FAIL when a remote master
  // does not take the tier-move stream within 5 s.
  virtual Status AttachOwnTier(SegmentId id, std::shared_ptr<SsdTier> tier,
                               std::shared_ptr<TierMover> mover, bool write_behind) = 0;
  // Detaches the tier (no more demotions into it) and unmounts the segment, dropping its
  // replicas. Errors: the master's UnmountSegment (the local state is dropped regardless).
  virtual Status UnmountOwn(SegmentId id) = 0;
};

}  // namespace tierkv
