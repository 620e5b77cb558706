// The master of embedded mode: a MasterService in this process, the memory of
// the segments mounted on it (so a transfer is a direct memcpy), and the
// maintenance thread (abandoned puts, watermark eviction and demotion).
//
// Several embedded clients of one process may share one InProcessMaster, each
// contributing a segment. Thread-safety: thread-safe.
#pragma once

#include <map>
#include <memory>
#include <shared_mutex>

#include "client/segment_access.h"
#include "common/periodic_thread.h"
#include "master/master_service.h"
#include "memory/memory_segment.h"
#include "ssd/ssd_tier.h"

namespace tierkv {

class InProcessMaster {
 public:
  // `maintenance_period` 0 = no background thread (tests drive maintenance).
  InProcessMaster(MasterOptions options, Millis maintenance_period);
  ~InProcessMaster();
  InProcessMaster(const InProcessMaster&) = delete;
  InProcessMaster& operator=(const InProcessMaster&) = delete;

  MasterService& master() { return master_; }

  // Mounts `segment` on the master under `name` and makes its bytes reachable (Find).
  Result<SegmentId> Attach(std::shared_ptr<MemorySegment> segment, const std::string& name);
  // Unmounts (dropping its replicas and detaching its tier) and forgets the memory. Readers
  // still copying keep it alive through their shared_ptr.
  Status Detach(SegmentId id);
  std::shared_ptr<SegmentAccess> Find(SegmentId id) const;

  // Gives segment `id` an SSD tier: eviction there demotes through `mover` (and with
  // `write_behind` puts are copied there), and disk replicas on it are read from it. Detach
  // drops it.
  void AttachTier(SegmentId id, std::shared_ptr<SsdTier> tier, std::shared_ptr<TierMover> mover,
                  bool write_behind);
  std::shared_ptr<SsdTier> FindTier(SegmentId id) const;

 private:
  MasterService master_;
  mutable std::shared_mutex mu_;
  std::map<SegmentId, std::shared_ptr<SegmentAccess>> memory_;  // guarded by mu_
  std::map<SegmentId, std::shared_ptr<SsdTier>> tiers_;         // guarded by mu_
  std::unique_ptr<PeriodicThread> maintenance_;                 // last: stopped before the maps go
};

}  // namespace tierkv
