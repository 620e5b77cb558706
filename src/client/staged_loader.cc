#include "client/staged_loader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>

#include "common/checksum.h"
#include "ssd/ssd_tier.h"
#include "ssd/staging_plan.h"
#include "tierkv/status.h"

namespace tierkv {
namespace {

void Fail(DiskRead& r, ErrorCode code) {
  r.result = ToInt(code);
  ZeroPieces(r.dst);
}

Result<StageResult> StagePart(SsdTier& tier, const std::vector<DiskRead*>& part) {
  std::vector<StageRequest> requests;
  requests.reserve(part.size());
  for (const DiskRead* r : part) {
    requests.push_back(StageRequest{*r->key, r->location, 0, r->location.size});
  }
  return tier.Stage(requests);
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

void StagedLoader::LoadDirect(SsdTier& tier, const std::vector<DiskRead*>& reads) const {
  // One call for the whole batch: the device keeps its queue full (refilled as reads
  // complete). Each object is verified (xxh3 in the caller's buffer) as soon as its read is
  // in, off the device's completion thread: on the transfer pool's workers (all of them: one
  // core hashes ~15 GB/s on the reference VM, less than two fast drives striped deliver), or
  // without workers on a helper thread while reads are still in flight, and by this thread
  // too once the last read is in. Why off the completion thread and before the end: a virtual
  // disk (the reference VM) completes a batch's reads nearly together, at its end; verified
  // one after the other on one thread, a call of 32 objects of 2 MiB spent ~2.7 of its ~26 ms
  // hashing with the device idle.
  std::vector<DirectRequest> requests;
  requests.reserve(reads.size());
  for (const DiskRead* r : reads) requests.push_back(DirectRequest{*r->key, r->location, r->dst});
  auto verify = [&](size_t j, const Status& read) {
    DiskRead& r = *reads[j];
    if (!read.ok()) {
      spdlog::warn("direct read of {} from the SSD tier failed: {}", *r.key, read.ToString());
      Fail(r, read.code());
      return;
    }
    if (HashPieces(r.dst) != r.checksum) {
      spdlog::error("checksum mismatch reading {} from the SSD tier (region {} offset {})", *r.key,
                    r.location.region, r.location.offset);
      Fail(r, ErrorCode::CHECKSUM_MISMATCH);
      return;
    }
    r.result = static_cast<int64_t>(r.location.size);
  };
  if (reads.size() < 2) {  // nothing to share
    (void)tier.ReadDirect(requests, verify);
    return;
  }
  if (pool_ != nullptr && pool_->threads() > 1) {
    std::vector<Status> io(reads.size());
    TransferPool::Stream verifying(*pool_, reads.size(), [&](size_t j) { verify(j, io[j]); });
    std::mutex push_mu;  // several devices' threads report completions
    (void)tier.ReadDirect(requests, [&](size_t j, const Status& read) {
      std::lock_guard lock(push_mu);
      io[j] = read;
      verifying.Push(j);
    });
    verifying.Finish();
    return;
  }
  std::mutex mu;
  std::condition_variable ready;
  std::deque<std::pair<size_t, Status>> queue;  // read, not yet verified
  bool io_done = false;
  // Verifies queued objects until the queue is empty and, if `wait`, no read is left.
  auto drain = [&](bool wait) {
    std::unique_lock lock(mu);
    while (true) {
      if (wait) ready.wait(lock, [&] { return io_done || !queue.empty(); });
      if (queue.empty()) return;
      auto [j, status] = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      verify(j, status);
      lock.lock();
    }
  };
  std::thread helper;
  try {
    helper = std::thread([&] { drain(/*wait=*/true); });
  } catch (const std::system_error&) {
    // No thread to spare: this thread verifies everything once the reads are in.
  }
  (void)tier.ReadDirect(requests, [&](size_t j, const Status& read) {
    std::lock_guard lock(mu);
    queue.emplace_back(j, read);
    ready.notify_one();
  });
  {
    std::lock_guard lock(mu);
    io_done = true;
  }
  ready.notify_all();
  drain(/*wait=*/false);
  if (helper.joinable()) helper.join();
}

void StagedLoader::LoadFromTier(SsdTier& tier, std::vector<DiskRead*>& all,
                                StagedLoadStats& stats) const {
  // In disk order (region, then offset): a batch's keys come in the caller's order, which
  // need not be the order demotion wrote them in, and a drive (or a virtual disk's host
  // cache) reads sequential ranges faster than scattered ones (fio on the reference VM: 2 MiB
  // reads at qd32, 2.3-2.5 GB/s sequential against 1.9-2.5 random).
  std::stable_sort(all.begin(), all.end(), [](const DiskRead* a, const DiskRead* b) {
    return std::pair(a->location.region, a->location.offset) <
           std::pair(b->location.region, b->location.offset);
  });
  // Block-aligned values bound for block-aligned buffers are read straight into them; the
  // others go through the staging buffer.
  std::vector<DiskRead*> direct, reads;
  for (DiskRead* r : all) {
    (SsdTier::DirectReadable(r->location, r->dst) ? direct : reads).push_back(r);
  }
  if (!direct.empty()) LoadDirect(tier, direct);
  if (reads.empty()) return;
  const uint64_t usable = PartBudget(tier.staging_capacity());
  // At most half the usable budget per part, so the next part stages while this one is
  // copied out; and at most kStageBatchBytes, so even a batch that would fit whole is cut into
  // a few parts and its disk reads overlap its copies.
  const uint64_t half = std::min(usable / 2, kStageBatchBytes);
  std::vector<uint64_t> sizes;
  sizes.reserve(reads.size());
  for (const DiskRead* r : reads) sizes.push_back(r->location.size);
  const StagingSplit split = SplitForStaging(sizes, usable, half);
  for (const StagingStream& s : split.streamed) {
    ++stats.streamed_objects;
    Stream(tier, *reads[s.index], s.piece_bytes);
  }
  std::vector<std::vector<DiskRead*>> parts;
  parts.reserve(split.parts.size());
  for (const auto& indices : split.parts) {
    auto& part = parts.emplace_back();
    for (size_t i : indices) part.push_back(reads[i]);
  }
  stats.parts += parts.size();
  if (parts.empty()) return;

  // Copies a staged part out, verifies it and releases its staging space.
  auto copy_out = [&](const std::vector<DiskRead*>& part, Result<StageResult>& staged) {
    if (!staged.ok()) {
      spdlog::warn("staging {} objects failed: {}", part.size(), staged.status().ToString());
      for (DiskRead* r : part) Fail(*r, staged.code());
      return;
    }
    pool_->ParallelFor(part.size(), [&](size_t j) {
      DiskRead& r = *part[j];
      const StagedPiece& piece = staged->pieces[j];
      if (!piece.status.ok()) {
        Fail(r, piece.status.code());
        return;
      }
      const uint64_t sum = ScatterCopy(piece.data, r.dst, /*hash=*/true);
      if (sum != r.checksum) {
        spdlog::error("checksum mismatch reading {} from the SSD tier (region {} offset {})",
                      *r.key, r.location.region, r.location.offset);
        Fail(r, ErrorCode::CHECKSUM_MISMATCH);
        return;
      }
      r.result = static_cast<int64_t>(r.location.size);
    });
    // Reclaimed mid-copy (the ticket outlived its TTL): the bytes may be a new tenant's.
    const bool held = tier.Held(staged->ticket);
    if (Status st = tier.Release(staged->ticket); !st.ok() && held) {
      spdlog::warn("releasing staging ticket {}: {}", staged->ticket, st.ToString());
    }
    if (!held) {
      for (DiskRead* r : part) {
        if (r->result >= 0) Fail(*r, ErrorCode::TRANSFER_FAIL);
      }
    }
  };
  // Pipeline: part k is copied out on another thread (with the pool) while this thread
  // stages part k+1. Staging stays on the calling thread so the next reads are submitted at
  // once; a staging thread would wait for a CPU the copy keeps busy (measured: the disk sat
  // idle ~20% of a load that way).
  Result<StageResult> staged = StagePart(tier, parts[0]);
  for (size_t k = 0; k < parts.size(); ++k) {
    if (k + 1 == parts.size()) {
      copy_out(parts[k], staged);  // nothing left to overlap with
      break;
    }
    std::future<void> copying =
        std::async(std::launch::async,
                   [&, k, current = std::move(staged)]() mutable { copy_out(parts[k], current); });
    staged = StagePart(tier, parts[k + 1]);
    copying.get();
  }
}

void StagedLoader::Stream(SsdTier& tier, DiskRead& r, uint64_t piece) const {
  if (piece == 0) {  // not even one 4096-byte piece fits the usable budget
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
