#include "client/staged_loader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <system_error>

#include "common/checksum.h"
#include "ssd/ssd_tier.h"
#include "tierkv/status.h"

namespace tierkv {
namespace {

void Fail(DiskRead& r, ErrorCode code) {
  r.result = ToInt(code);
  for (const auto& p : r.dst) std::memset(p.ptr, 0, p.size);  // never leave wrong bytes
}

}  // namespace

uint64_t StagedLoader::PartBudget(uint64_t capacity) const {
  return static_cast<uint64_t>(usable_ratio_ * static_cast<double>(capacity));
}

StagedLoadStats StagedLoader::Load(std::vector<DiskRead>& reads) const {
  StagedLoadStats stats;
  std::map<SsdTier*, std::vector<DiskRead*>> by_tier;
  for (auto& r : reads) {
    if (!r.tier) {
      Fail(r, ErrorCode::OBJECT_NOT_FOUND);
      continue;
    }
    by_tier[r.tier.get()].push_back(&r);
  }
  for (auto& [tier, list] : by_tier) LoadFromTier(*tier, list, stats);
  return stats;
}

namespace {

// Indices of staged pieces ready to be copied out, handed from the staging thread (Stage's
// callback) to the copy threads.
class ReadyQueue {
 public:
  void Push(size_t index) {
    {
      std::lock_guard lock(mu_);
      ready_.push_back(index);
    }
    cv_.notify_one();
  }
  // No more pieces will come.
  void Close() {
    {
      std::lock_guard lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
  }
  // The next ready piece; nullopt once the queue is closed and empty.
  std::optional<size_t> Pop() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !ready_.empty() || closed_; });
    if (ready_.empty()) return std::nullopt;
    const size_t index = ready_.front();
    ready_.pop_front();
    return index;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> ready_;  // guarded by mu_
  bool closed_ = false;       // guarded by mu_
};

// Copies one staged piece out and verifies it against the object's checksum.
void CopyOut(DiskRead& r, const StagedPiece& piece) {
  if (!piece.status.ok()) {
    Fail(r, piece.status.code());
    return;
  }
  const uint64_t sum = ScatterCopy(piece.data, r.dst, /*hash=*/true);
  if (sum != r.checksum) {
    spdlog::error("checksum mismatch reading {} from the SSD tier (region {} offset {})", *r.key,
                  r.location.region, r.location.offset);
    Fail(r, ErrorCode::CHECKSUM_MISMATCH);
    return;
  }
  r.result = static_cast<int64_t>(r.location.size);
}

}  // namespace

// One part in flight: its staging call has returned (all reads done) but copy threads may
// still be copying its pieces out.
struct StagedLoader::PartRun {
  std::vector<DiskRead*>* part = nullptr;
  std::vector<StagedPiece> pieces;  // filled by Stage's callback, one per object
  ReadyQueue queue;
  std::vector<std::future<void>> copiers;
  Result<StageResult> staged = Status(ErrorCode::INTERNAL_ERROR, "not staged");
};

std::unique_ptr<StagedLoader::PartRun> StagedLoader::StartPart(SsdTier& tier,
                                                               std::vector<DiskRead*>& part) const {
  auto run = std::make_unique<PartRun>();
  run->part = &part;
  run->pieces.resize(part.size());
  // Copy threads take pieces as their reads complete, so the copy of the part overlaps its
  // own reads; a single piece is copied on this thread after its read (nothing to overlap).
  const size_t copiers =
      part.size() < 2 ? 0 : std::min<size_t>(pool_ != nullptr ? pool_->threads() : 1, part.size());
  PartRun* raw = run.get();
  for (size_t c = 0; c < copiers; ++c) {
    try {
      run->copiers.push_back(std::async(std::launch::async, [raw] {
        while (std::optional<size_t> j = raw->queue.Pop())
          CopyOut(*(*raw->part)[*j], raw->pieces[*j]);
      }));
    } catch (const std::system_error&) {
      break;  // no thread to spare: the pieces are copied by FinishPart on this thread
    }
  }
  std::vector<StageRequest> requests;
  requests.reserve(part.size());
  for (const DiskRead* r : part) {
    requests.push_back(StageRequest{*r->key, r->location, 0, r->location.size});
  }
  run->staged = tier.Stage(requests, [raw](size_t j, const StagedPiece& piece) {
    raw->pieces[j] = piece;
    raw->queue.Push(j);
  });
  raw->queue.Close();
  return run;
}

void StagedLoader::FinishPart(SsdTier& tier, PartRun& run) const {
  std::vector<DiskRead*>& part = *run.part;
  // Pieces no copy thread took (none started, or a single piece) are copied here.
  if (run.copiers.empty()) {
    while (std::optional<size_t> j = run.queue.Pop()) CopyOut(*part[*j], run.pieces[*j]);
  }
  for (auto& copier : run.copiers) copier.get();
  if (!run.staged.ok()) {
    spdlog::warn("staging {} objects failed: {}", part.size(), run.staged.status().ToString());
    for (DiskRead* r : part) Fail(*r, run.staged.code());
    return;
  }
  const uint64_t ticket = run.staged->ticket;
  if (ticket == 0) return;  // every piece failed: nothing held
  // Reclaimed mid-copy (the ticket outlived its TTL): the bytes may be a new tenant's.
  const bool held = tier.Held(ticket);
  if (Status st = tier.Release(ticket); !st.ok() && held) {
    spdlog::warn("releasing staging ticket {}: {}", ticket, st.ToString());
  }
  if (!held) {
    for (DiskRead* r : part) {
      if (r->result >= 0) Fail(*r, ErrorCode::TRANSFER_FAIL);
    }
  }
}

void StagedLoader::LoadFromTier(SsdTier& tier, std::vector<DiskRead*>& reads,
                                StagedLoadStats& stats) const {
  const uint64_t usable = PartBudget(tier.staging_capacity());
  // At most half the usable budget per part, so the next part stages while this one's last
  // copies finish; and at most kPipelinePart, so one call does not hold the whole budget.
  const uint64_t half = std::min(usable / 2, kPipelinePart);
  std::vector<std::vector<DiskRead*>> parts;
  uint64_t used = 0;
  for (DiskRead* r : reads) {
    const uint64_t need = StagingNeed(r->location.size);
    if (need > usable) {
      ++stats.streamed_objects;
      Stream(tier, *r, usable);
      continue;
    }
    if (parts.empty() || used + need > half) {
      parts.emplace_back();
      used = 0;
    }
    parts.back().push_back(r);
    used += need;
  }
  stats.parts += parts.size();

  // Part k+1 is staged (its reads submitted) as soon as part k's reads are done, while part
  // k's last pieces are still being copied; part k is then finished (copies joined, staging
  // released). So at most two parts hold staging space.
  std::unique_ptr<PartRun> pending;
  for (auto& part : parts) {
    std::unique_ptr<PartRun> run = StartPart(tier, part);
    if (pending) FinishPart(tier, *pending);
    pending = std::move(run);
  }
  if (pending) FinishPart(tier, *pending);
}

void StagedLoader::Stream(SsdTier& tier, DiskRead& r, uint64_t usable) const {
  // The largest piece whose staging need fits the usable budget.
  const uint64_t piece = usable > 8192 + 4096 ? (usable - 8192) & ~uint64_t{4095} : 0;
  if (piece == 0) {
    Fail(r, ErrorCode::OBJECT_TOO_LARGE);
    return;
  }
  ChecksumStream sum;
  for (uint64_t off = 0; off < r.location.size; off += piece) {
    const uint64_t len = std::min(piece, r.location.size - off);
    auto staged = tier.Stage({StageRequest{*r.key, r.location, off, len}});
    Status st = staged.ok() ? staged->pieces[0].status : staged.status();
    if (st.ok()) {
      ScatterCopyAt(staged->pieces[0].data, len, r.dst, off, &sum);
      if (!tier.Held(staged->ticket)) {
        st = Status(ErrorCode::TRANSFER_FAIL, "staging space reclaimed during the copy");
      }
    }
    if (staged.ok()) (void)tier.Release(staged->ticket);
    if (!st.ok()) {
      spdlog::warn("streaming {} from the SSD tier failed at byte {}: {}", *r.key, off,
                   st.ToString());
      Fail(r, st.code());
      return;
    }
  }
  if (sum.Digest() != r.checksum) {
    spdlog::error("checksum mismatch streaming {} from the SSD tier", *r.key);
    Fail(r, ErrorCode::CHECKSUM_MISMATCH);
    return;
  }
  r.result = static_cast<int64_t>(r.location.size);
}

}  // namespace tierkv
