// TierStager: the store's StageSource — answers the stage requests its network segment server
// receives by reading them from the SSD tier, off the server's progress thread.
//
// Policy: kThreads stager threads each take the queue's head and what follows it while the
// batch's staging need (StagingNeed per range) stays within kStageBatchBytes and half the
// staging buffer, and read the batch with one SsdTier::Stage call; each range is handed back as
// soon as its read completes, so its bytes are on the wire while later ones are still read. The
// batch's staging ticket is released when the last hold of its ranges is dropped (the server
// drops it once the reply is sent, or its peer is gone). Two threads keep reads in flight while
// one batch's last read completes. Staging space whose hold never came back (a send that never
// completed) is reclaimed by its Store after the tier's staging TTL.
// Thread-safety: thread-safe. The destructor fails what is queued, lets a batch being read
// finish, and joins the threads.
#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ssd/ssd_tier.h"
#include "transport/stage_source.h"

namespace tierkv {

class TierStager final : public transport::StageSource {
 public:
  static constexpr int kThreads = 2;

  // Stages from `tier`; `name` (the server's address) names it in logs. INTERNAL_ERROR when
  // a thread cannot start.
  static Result<std::unique_ptr<TierStager>> Start(std::shared_ptr<SsdTier> tier, std::string name);
  ~TierStager() override;
  TierStager(const TierStager&) = delete;
  TierStager& operator=(const TierStager&) = delete;

  uint64_t staging_capacity() const override { return tier_->staging_capacity(); }
  void Submit(transport::StageRange range, transport::StageDone done) override;
  void FailQueued(const Status& why) override;

 private:
  struct Job {
    transport::StageRange range;
    transport::StageDone done;
  };
  TierStager(std::shared_ptr<SsdTier> tier, std::string name)
      : tier_(std::move(tier)), name_(std::move(name)) {}
  void Loop();
  void StageBatch(std::vector<Job> jobs);

  const std::shared_ptr<SsdTier> tier_;
  const std::string name_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;   // guarded by mu_
  bool stop_ = false;       // guarded by mu_
  int reading_ = 0;         // batches being read; guarded by mu_
  bool next_lone_ = false;  // the next batch is the lone head of a burst; guarded by mu_
  bool lone_read_ = false;  // a lone head is being read, the others wait; guarded by mu_
  std::vector<std::thread> threads_;
};

}  // namespace tierkv
