// InProcessBackend: ClientBackend of embedded mode — an InProcessMaster's MasterService and
// the memory of the segments mounted on it. Thread-safety: thread-safe.
#pragma once

#include <memory>

#include "client/client_backend.h"
#include "client/in_process_master.h"

namespace tierkv {

class InProcessBackend final : public ClientBackend {
 public:
  explicit InProcessBackend(std::shared_ptr<InProcessMaster> master) : master_(std::move(master)) {}

  std::vector<Result<PutStartResult>> PutStart(const std::vector<std::string>& keys,
                                               const std::vector<uint64_t>& sizes,
                                               const ReplicateConfig& config) override {
    return master_->master().PutStart(keys, sizes, config);
  }
  std::vector<Status> PutEnd(const std::vector<std::string>& keys,
                             const std::vector<uint64_t>& put_ids,
                             const std::vector<uint64_t>& checksums) override {
    return master_->master().PutEnd(keys, put_ids, checksums);
  }
  std::vector<Status> PutRevoke(const std::vector<std::string>& keys,
                                const std::vector<uint64_t>& put_ids) override {
    return master_->master().PutRevoke(keys, put_ids);
  }
  std::vector<int> Exists(const std::vector<std::string>& keys) override {
    return master_->master().Exists(keys);
  }
  std::vector<Result<ObjectReplicas>> GetReplicas(const std::vector<std::string>& keys) override {
    return master_->master().GetReplicas(keys);
  }
  std::vector<Result<PutStartResult>> PromoteStart(const std::vector<std::string>& keys,
                                                   uint32_t min_hits) override {
    return master_->master().PromoteStart(keys, min_hits);
  }
  std::vector<Status> PromoteEnd(const std::vector<std::string>& keys,
                                 const std::vector<uint64_t>& promotion_ids,
                                 const std::vector<bool>& ok) override {
    return master_->master().PromoteEnd(keys, promotion_ids, ok);
  }
  Status Remove(const std::string& key, bool force) override {
    return master_->master().Remove(key, force);
  }
  uint64_t RemoveAll(bool force) override { return master_->master().RemoveAll(force); }
  const Clock* clock() const override { return master_->master().options().clock; }

  std::shared_ptr<SegmentAccess> FindSegment(SegmentId id) override { return master_->Find(id); }
  std::shared_ptr<SsdTier> FindTier(SegmentId id) override { return master_->FindTier(id); }
  std::string SegmentName(SegmentId id) override {
    auto seg = master_->master().segments().Find(id);
    return seg ? seg->name : std::string();
  }

 private:
  const std::shared_ptr<InProcessMaster> master_;
};

}  // namespace tierkv
