#include "client/in_process_master.h"

#include <spdlog/spdlog.h>

namespace tierkv {

InProcessMaster::InProcessMaster(MasterOptions options, Millis maintenance_period)
    : master_(std::move(options)) {
  if (maintenance_period.count() > 0) {
    maintenance_ =
        std::make_unique<PeriodicThread>(maintenance_period, [this] { master_.RunMaintenance(); });
  }
}

InProcessMaster::~InProcessMaster() { maintenance_.reset(); }

Result<SegmentId> InProcessMaster::Attach(std::shared_ptr<MemorySegment> segment,
                                          const std::string& name) {
  // Publish the memory before the master can place replicas on it.
  std::unique_lock lock(mu_);
  auto id = master_.MountSegment(name, segment->size());
  if (!id.ok()) return id;
  memory_.emplace(*id, std::make_shared<LocalSegmentAccess>(std::move(segment)));
  return id;
}

Status InProcessMaster::Detach(SegmentId id) {
  // Write-behind copies queued for the segment finish while its tier is attached.
  master_.DrainWriteBehind();
  Status st = master_.UnmountSegment(id);  // also detaches its tier mover
  std::unique_lock lock(mu_);
  memory_.erase(id);
  tiers_.erase(id);
  return st;
}

void InProcessMaster::AttachTier(SegmentId id, std::shared_ptr<SsdTier> tier,
                                 std::shared_ptr<TierMover> mover, bool write_behind) {
  {
    std::unique_lock lock(mu_);
    tiers_[id] = std::move(tier);
  }
  master_.SetTierMover(id, std::move(mover), write_behind);
}

std::shared_ptr<SsdTier> InProcessMaster::FindTier(SegmentId id) const {
  std::shared_lock lock(mu_);
  auto it = tiers_.find(id);
  return it == tiers_.end() ? nullptr : it->second;
}

std::shared_ptr<SegmentAccess> InProcessMaster::Find(SegmentId id) const {
  std::shared_lock lock(mu_);
  auto it = memory_.find(id);
  return it == memory_.end() ? nullptr : it->second;
}

}  // namespace tierkv
