#include "store/tier_stager.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <system_error>

namespace tierkv {
namespace {

// Releases a staging ticket when the last range staged into its space is done with.
struct TicketHold {
  std::shared_ptr<SsdTier> tier;
  uint64_t ticket = 0;  // set once Stage returned
  ~TicketHold() {
    if (ticket != 0) (void)tier->Release(ticket);  // NOT_FOUND if reclaimed: nothing to do
  }
};

}  // namespace

Result<std::unique_ptr<TierStager>> TierStager::Start(std::shared_ptr<SsdTier> tier,
                                                      std::string name) {
  if (!tier) return Status(ErrorCode::INVALID_PARAMS, "TierStager: no SSD tier");
  std::unique_ptr<TierStager> stager(new TierStager(std::move(tier), std::move(name)));
  try {
    for (int i = 0; i < kThreads; ++i) {
      stager->threads_.emplace_back([raw = stager.get()] { raw->Loop(); });
    }
  } catch (const std::system_error& error) {
    return Status(ErrorCode::INTERNAL_ERROR,
                  std::string("TierStager: cannot start its threads: ") + error.what());
  }
  return stager;
}

TierStager::~TierStager() {
  FailQueued(Status(ErrorCode::TRANSFER_FAIL, "the store is stopping"));
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) {
    if (t.joinable()) t.join();
  }
}

void TierStager::Submit(transport::StageRange range, transport::StageDone done) {
  {
    std::lock_guard lock(mu_);
    // The first range after an idle spell is read alone (Loop).
    if (queue_.empty() && reading_ == 0) next_lone_ = true;
    queue_.push_back(Job{std::move(range), std::move(done)});
  }
  cv_.notify_one();
}

void TierStager::FailQueued(const Status& why) {
  std::deque<Job> failed;
  {
    std::lock_guard lock(mu_);
    failed.swap(queue_);
  }
  for (Job& job : failed) job.done(transport::StagedRange{why, nullptr, nullptr});
}

void TierStager::Loop() {
  std::unique_lock lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || (!queue_.empty() && !lone_read_); });
    if (stop_) break;
    // After an idle spell, the head alone (its read, not sharing the drive with a batch,
    // completes soonest and starts the wire; the others wait for it); else the head and what
    // follows while it fits a batch.
    const bool lone = next_lone_;
    next_lone_ = false;
    const uint64_t limit = lone ? 0 : std::min(tier_->staging_capacity() / 2, kStageBatchBytes);
    std::vector<Job> jobs;
    uint64_t need = 0;
    while (!queue_.empty()) {
      const uint64_t more = StagingNeed(queue_.front().range.length);
      if (!jobs.empty() && need + more > limit) break;
      need += more;
      jobs.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    ++reading_;
    lone_read_ = lone;
    lock.unlock();
    StageBatch(std::move(jobs));
    lock.lock();
    --reading_;
    if (lone) {
      lone_read_ = false;
      cv_.notify_all();
    }
  }
}

void TierStager::StageBatch(std::vector<Job> jobs) {
  std::vector<StageRequest> requests;
  requests.reserve(jobs.size());
  for (const Job& job : jobs) {
    requests.push_back(
        StageRequest{job.range.key, job.range.location, job.range.value_offset, job.range.length});
  }
  auto hold = std::make_shared<TicketHold>();
  hold->tier = tier_;
  // Each range goes back as soon as it is read (the device threads call this).
  auto on_piece = [&](size_t index, const StagedPiece& piece) {
    transport::StagedRange staged{piece.status, piece.data, nullptr};
    if (piece.status.ok()) staged.hold = hold;
    jobs[index].done(std::move(staged));
  };
  Result<StageResult> result = tier_->Stage(requests, on_piece);
  if (!result.ok()) {
    // Failed as a whole (no staging space in time, the batch too large): no piece was called.
    spdlog::warn("tier stager {}: staging {} ranges failed: {}", name_, jobs.size(),
                 result.status().ToString());
    for (Job& job : jobs) job.done(transport::StagedRange{result.status(), nullptr, nullptr});
    return;
  }
  hold->ticket = result->ticket;  // released when the last range staged from it is done with
}

}  // namespace tierkv
