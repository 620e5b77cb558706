// InProcessBackend: the ClientBackend of embedded mode — an InProcessMaster's MasterService and
// the memory of the segments mounted on it (a transfer is a memcpy). Several clients of one
// process may share one InProcessMaster, each with a backend of its own.
// Thread-safety: thread-safe.
#pragma once

#include <memory>
#include <string>

#include "client/client_backend.h"
#include "client/in_process_master.h"

namespace tierkv {

class InProcessBackend final : public ClientBackend {
 public:
  explicit InProcessBackend(std::shared_ptr<InProcessMaster> master) : master_(std::move(master)) {}

  MasterApi& master() override { return master_->master(); }
  bool serves_other_processes() const override { return false; }
  Result<SegmentId> MountOwn(std::shared_ptr<MemorySegment> segment,
                             const std::string& mounted_name, OwnTier tier) override {
    auto id = master_->Attach(std::move(segment), mounted_name);
    if (id.ok() && tier.tier) {
      master_->AttachTier(*id, std::move(tier.tier), std::move(tier.mover), tier.write_behind);
    }
    return id;
  }
  void DropOwnDiskReplicas(SegmentId id, uint32_t region, uint64_t generation,
                           const std::vector<std::string>& keys) override {
    master_->master().DropDiskReplicas(id, region, generation, keys);
  }
  Status UnmountOwn(SegmentId id) override { return master_->Detach(id); }

  std::shared_ptr<SegmentAccess> FindSegment(SegmentId id) override { return master_->Find(id); }
  std::shared_ptr<SsdTier> FindTier(SegmentId id) override { return master_->FindTier(id); }
  std::string SegmentName(SegmentId id) override {
    auto seg = master_->master().segments().Find(id);
    return seg ? seg->name : std::string();
  }

  const std::shared_ptr<InProcessMaster>& in_process_master() const { return master_; }

 private:
  const std::shared_ptr<InProcessMaster> master_;
};

}  // namespace tierkv
