// SegmentIndex: a store's index of its own segment — the objects the master made readable in it
// (memory replicas, by offset) and the records of its SSD tier the master attached as disk
// replicas (by key), with what the master needs to serve them again (master/segment_index_types.h).
//
// The master keeps it current through the segment's stream (rpc/segment_link.h): Apply() takes
// each IndexBatch in order. When the store registers with a (new) master it reports it
// (Report()); a restarted master rebuilds those objects from the reports of all its stores.
// A report never vouches for bytes that are not there: a memory entry is reported only if the
// segment's bytes still match its checksum (a segment whose memory is gone, or a range a stale
// writer scribbled on, reports nothing of it), and a disk entry only if its region still holds
// that generation. Only what the master attached is in it, so removed objects never come back
// from the tier's leftover records.
// Thread-safety: thread-safe (one mutex; Report() checks bytes and regions without it).
#pragma once

#include <absl/container/flat_hash_map.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "master/segment_index_types.h"
#include "memory/memory_segment.h"

namespace tierkv {

struct SegmentIndexStats {
  uint64_t memory_entries = 0;
  uint64_t disk_entries = 0;
  uint64_t batches = 0;         // batches (parts included) applied
  uint64_t reports = 0;         // reports made
  uint64_t reported = 0;        // entries in the last report
  uint64_t report_skipped = 0;  // entries the last report left out (bytes or region changed)
};

class SegmentIndex {
 public:
  // Whether a disk record is still in the tier (SsdTier::Holds); null: no tier.
  using DiskHolds = std::function<bool(const DiskLocation&)>;
  // `segment`: the memory the entries point into; `disk_holds`: the SSD tier behind it.
  SegmentIndex(std::shared_ptr<MemorySegment> segment, DiskHolds disk_holds);

  // Applies one batch (or part): commits, disk attaches, frees, disk drops, in that order.
  // Entries outside the segment are ignored (logged once).
  void Apply(const IndexBatch& batch);
  // The tier reused `region`: forgets the disk entries of `keys` that pointed into it at
  // `generation` (before the region is written again).
  void DropDiskRegion(uint32_t region, uint64_t generation, const std::vector<std::string>& keys);
  // Forgets everything (tests: a store whose index was lost).
  void Clear();
  // Zeroes the segment's bytes, keeping the index (tests: a store whose memory is gone).
  void TEST_WipeSegment();

  // What to report to a master: memory entries whose bytes match their checksum (checked with
  // `threads` threads), and disk entries whose region still holds them.
  IndexReport Report(unsigned threads = 2);

  SegmentIndexStats stats() const;

 private:
  const std::shared_ptr<MemorySegment> segment_;
  const DiskHolds disk_holds_;
  mutable std::mutex mu_;
  absl::flat_hash_map<uint64_t, IndexEntry> memory_;   // by offset; guarded by mu_
  absl::flat_hash_map<std::string, IndexEntry> disk_;  // by key; guarded by mu_
  uint64_t batches_ = 0;                               // guarded by mu_
  uint64_t reports_ = 0;                               // guarded by mu_
  uint64_t reported_ = 0;                              // guarded by mu_
  uint64_t report_skipped_ = 0;                        // guarded by mu_
  std::atomic<bool> warned_outside_{false};
};

}  // namespace tierkv
