#include "store/segment_index.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <thread>
#include <utility>

#include "common/checksum.h"
#include "common/prefault.h"

namespace tierkv {

SegmentIndex::SegmentIndex(std::shared_ptr<MemorySegment> segment, DiskHolds disk_holds)
    : segment_(std::move(segment)), disk_holds_(std::move(disk_holds)) {}

void SegmentIndex::Apply(const IndexBatch& batch) {
  const uint64_t size = segment_->size();
  std::lock_guard lock(mu_);
  for (const IndexEntry& e : batch.commits) {
    if (e.size == 0 || e.offset > size || e.size > size - e.offset) {
      if (!warned_outside_.exchange(true)) {
        spdlog::warn("segment index of {}: a commit of {} at [{}, +{}) is outside the segment",
                     segment_->name(), e.key, e.offset, e.size);
      }
      continue;
    }
    memory_.insert_or_assign(e.offset, e);
  }
  for (const IndexEntry& e : batch.disk_attached) disk_.insert_or_assign(e.key, e);
  for (const uint64_t offset : batch.frees) memory_.erase(offset);
  for (const DiskDrop& d : batch.disk_dropped) {
    auto it = disk_.find(d.key);
    if (it != disk_.end() && it->second.disk.region == d.location.region &&
        it->second.disk.generation == d.location.generation &&
        it->second.disk.offset == d.location.offset) {
      disk_.erase(it);
    }
  }
  ++batches_;
}

void SegmentIndex::DropDiskRegion(uint32_t region, uint64_t generation,
                                  const std::vector<std::string>& keys) {
  std::lock_guard lock(mu_);
  for (const std::string& key : keys) {
    auto it = disk_.find(key);
    if (it != disk_.end() && it->second.disk.region == region &&
        it->second.disk.generation == generation) {
      disk_.erase(it);
    }
  }
}

void SegmentIndex::Clear() {
  std::lock_guard lock(mu_);
  memory_.clear();
  disk_.clear();
}

void SegmentIndex::TEST_WipeSegment() {
  std::memset(segment_->base(), 0, segment_->size());
  spdlog::warn("segment index of {}: segment memory zeroed (test hook)", segment_->name());
}

IndexReport SegmentIndex::Report(unsigned threads) {
  IndexReport report;
  {
    std::lock_guard lock(mu_);
    // In segment order (the master re-takes the ranges one after another): the offsets sorted,
    // then the entries copied in that order. Sorting the copied entries themselves (136 bytes
    // each, strings inside) took longer than the copy at 10 M.
    std::vector<uint64_t> offsets;
    offsets.reserve(memory_.size());
    for (const auto& [offset, e] : memory_) offsets.push_back(offset);
    std::sort(offsets.begin(), offsets.end());
    report.memory.reserve(offsets.size());
    // Millions of entries: faulting the buffer's pages in one call (huge pages, it is short-lived)
    // instead of one at a time was a third of the report's time at 10 M.
    PrefaultForWrite(report.memory.data(), report.memory.capacity() * sizeof(IndexEntry), true);
    constexpr size_t kAhead = 8;  // lookups in flight
    for (size_t i = 0; i < offsets.size(); ++i) {
      if (i + kAhead < offsets.size()) memory_.prefetch(offsets[i + kAhead]);
      report.memory.push_back(memory_.find(offsets[i])->second);
    }
    report.disk.reserve(disk_.size());
    for (const auto& [key, e] : disk_) report.disk.push_back(e);
  }
  // Bytes first, without the lock (batches may be applied meanwhile; the master reconciles
  // whatever changes after the report).
  std::vector<uint8_t> ok(report.memory.size(), 0);
  const uint8_t* base = segment_->base();
  auto check = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      const IndexEntry& e = report.memory[i];
      ok[i] = Checksum(base + e.offset, e.size) == e.checksum ? 1 : 0;
    }
  };
  const size_t n = report.memory.size();
  const unsigned workers =
      static_cast<unsigned>(std::min<size_t>(std::max(1u, threads), 1 + n / 4096));
  if (workers <= 1) {
    check(0, n);
  } else {
    std::vector<std::thread> pool;
    for (unsigned w = 0; w < workers; ++w) {
      pool.emplace_back(check, n * w / workers, n * (w + 1) / workers);
    }
    for (auto& t : pool) t.join();
  }
  uint64_t skipped = 0;
  std::vector<IndexEntry> gone_memory, gone_disk;
  size_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!ok[i]) {
      ++skipped;
      gone_memory.push_back(std::move(report.memory[i]));
      continue;
    }
    if (kept != i) report.memory[kept] = std::move(report.memory[i]);
    ++kept;
  }
  report.memory.resize(kept);
  auto stale_disk = [&](const IndexEntry& e) { return !disk_holds_ || !disk_holds_(e.disk); };
  for (auto it = report.disk.begin(); it != report.disk.end();) {
    if (!stale_disk(*it)) {
      ++it;
      continue;
    }
    ++skipped;
    gone_disk.push_back(std::move(*it));
    it = report.disk.erase(it);
  }
  {
    std::lock_guard lock(mu_);
    // What was left out is forgotten too (unless it changed meanwhile): nothing will vouch for it.
    for (const IndexEntry& e : gone_memory) {
      auto it = memory_.find(e.offset);
      if (it != memory_.end() && it->second.put_id == e.put_id) memory_.erase(it);
    }
    for (const IndexEntry& e : gone_disk) {
      auto it = disk_.find(e.key);
      if (it != disk_.end() && it->second.put_id == e.put_id) disk_.erase(it);
    }
    ++reports_;
    reported_ = report.memory.size() + report.disk.size();
    report_skipped_ = skipped;
  }
  if (skipped > 0) {
    spdlog::warn(
        "segment index of {}: {} entries left out of the report (their bytes no longer match "
        "their checksum, or their disk region was reused)",
        segment_->name(), skipped);
  }
  return report;
}

SegmentIndexStats SegmentIndex::stats() const {
  std::lock_guard lock(mu_);
  SegmentIndexStats s;
  s.memory_entries = memory_.size();
  s.disk_entries = disk_.size();
  s.batches = batches_;
  s.reports = reports_;
  s.reported = reported_;
  s.report_skipped = report_skipped_;
  return s;
}

}  // namespace tierkv
