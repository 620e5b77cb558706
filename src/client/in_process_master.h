// The master of embedded mode: a MasterService in this process, the memory of
// the segments mounted on it (so a transfer is a direct memcpy), and the
// maintenance thread (abandoned puts, watermark eviction and demotion, expired staging
// space).
//
// Several embedded clients of one process may share one InProcessMaster, each
// contributing a segment. Thread-safety: thread-safe.
#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <thread>

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

  // Mounts `segment` on the master and makes its bytes reachable.
  Result<SegmentId> Attach(std::shared_ptr<MemorySegment> segment);
  // Unmounts (dropping its replicas) and forgets the memory. Readers still
  // copying keep it alive through their shared_ptr.
  Status Detach(SegmentId id);
  std::shared_ptr<MemorySegment> Find(SegmentId id) const;

  // Gives segment `id` an SSD tier: eviction there demotes through it, disk replicas on it
  // are read from it, and maintenance reclaims its expired staging space. Detach drops it.
  void AttachTier(SegmentId id, std::shared_ptr<SsdTier> tier);
  std::shared_ptr<SsdTier> FindTier(SegmentId id) const;

 private:
  void MaintenanceLoop(Millis period);

  MasterService master_;
  mutable std::shared_mutex mu_;
  std::map<SegmentId, std::shared_ptr<MemorySegment>> memory_;  // guarded by mu_
  std::map<SegmentId, std::shared_ptr<SsdTier>> tiers_;         // guarded by mu_
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;  // guarded by stop_mu_
  std::thread maintenance_;
};

}  // namespace tierkv
