#include "client/in_process_master.h"

#include <spdlog/spdlog.h>

#include "client/local_tier.h"

namespace tierkv {

InProcessMaster::InProcessMaster(MasterOptions options, Millis maintenance_period)
    : master_(std::move(options)) {
  if (maintenance_period.count() > 0) {
    maintenance_ = std::thread([this, maintenance_period] { MaintenanceLoop(maintenance_period); });
  }
}

InProcessMaster::~InProcessMaster() {
  {
    std::lock_guard lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (maintenance_.joinable()) maintenance_.join();
}

void InProcessMaster::MaintenanceLoop(Millis period) {
  std::unique_lock lock(stop_mu_);
  while (!stop_cv_.wait_for(lock, period, [this] { return stop_; })) {
    lock.unlock();
    master_.ReclaimAbandonedPuts();
    master_.EvictIfNeeded();
    std::vector<std::shared_ptr<SsdTier>> tiers;
    {
      std::shared_lock tiers_lock(mu_);
      for (const auto& [id, tier] : tiers_) tiers.push_back(tier);
    }
    for (const auto& tier : tiers) tier->ReclaimExpired();
    lock.lock();
  }
}

Result<SegmentId> InProcessMaster::Attach(std::shared_ptr<MemorySegment> segment) {
  // Publish the memory before the master can place replicas on it.
  std::unique_lock lock(mu_);
  auto id = master_.MountSegment(segment->name(), segment->size());
  if (!id.ok()) return id;
  memory_.emplace(*id, std::move(segment));
  return id;
}

Status InProcessMaster::Detach(SegmentId id) {
  Status st = master_.UnmountSegment(id);  // also detaches its tier mover
  std::unique_lock lock(mu_);
  memory_.erase(id);
  tiers_.erase(id);
  return st;
}

void InProcessMaster::AttachTier(SegmentId id, std::shared_ptr<SsdTier> tier) {
  auto segment = Find(id);
  {
    std::unique_lock lock(mu_);
    tiers_[id] = tier;
  }
  master_.SetTierMover(id, std::make_shared<LocalTierMover>(std::move(segment), std::move(tier)));
}

std::shared_ptr<SsdTier> InProcessMaster::FindTier(SegmentId id) const {
  std::shared_lock lock(mu_);
  auto it = tiers_.find(id);
  return it == tiers_.end() ? nullptr : it->second;
}

std::shared_ptr<MemorySegment> InProcessMaster::Find(SegmentId id) const {
  std::shared_lock lock(mu_);
  auto it = memory_.find(id);
  return it == memory_.end() ? nullptr : it->second;
}

}  // namespace tierkv
