// SegmentLink: the store's end of its segment's TierMoves stream to the master — the one stream
// every store keeps open per segment it contributes. Over it the master
//   - feeds the store's index of the segment (store/segment_index.h): batches of commits, frees
//     and disk-replica changes, each applied and acknowledged (a freed range is reused only
//     once acknowledged: master/segment_feed.h);
//   - orders tier moves (demotions, write-behind copies) into the store's SSD tier, when it has
//     one, answered with the store's LocalTierMover (the master's side: rpc/tier_moves.h).
// Each stream starts with the store's report of its index; a (new) master adopts it on the
// segment's first stream (restart recovery) and reconciles it on later ones, then accepts the
// stream. The link re-opens the stream whenever it ends or the segment is re-mounted under
// another id (master restart, failover to another leader, expiry) and retries every `retry`
// while the master does not take it.
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include "common/clock.h"
#include "master/tier_mover.h"
#include "store/segment_index.h"

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace tierkv {

class RemoteMaster;

struct SegmentLinkOptions {
  // The store's SSD tier writer (null: no tier; the master then never orders tier moves here).
  std::shared_ptr<TierMover> mover;
  // Ask the master to copy each put on the segment to the tier soon after its PutEnd
  // (offload_write_policy write_behind); needs `mover`.
  bool write_behind = false;
  // The segment's index (null: a tier-only stream, as masters before the index knew them).
  std::shared_ptr<SegmentIndex> index;
  Millis retry{200};
  // Test hooks (fault tests of restart recovery; tierkv store reads them from TIERKV_TEST_*
  // environment variables): wait `reopen_delay` before each stream re-opens (the first one
  // excepted); sleep `report_chunk_delay` between chunks of the index report (a store killed
  // mid-recovery); zero the segment's memory before each report but the first (a store whose
  // memory is gone while its index survived).
  struct TestHooks {
    Millis reopen_delay{0};
    Millis report_chunk_delay{0};
    bool wipe_before_report = false;
  } test;
};

class SegmentLink {
 public:
  // Entries per report chunk (one stream message each).
  static constexpr size_t kReportChunk = 8192;

  // Keeps a stream open on `master`'s current channel for the segment `handle` (as
  // MountSegment returned it; followed across re-mounts). Never fails: its state is in
  // connected().
  SegmentLink(RemoteMaster& master, uint64_t handle, SegmentLinkOptions options);
  ~SegmentLink();  // closes the stream and joins the threads
  SegmentLink(const SegmentLink&) = delete;
  SegmentLink& operator=(const SegmentLink&) = delete;

  // Whether a stream is open and the master accepted it (it linked the index and attached the
  // tier: the segment is placeable, demotions come here).
  bool connected() const { return connected_.load(); }
  // Streams opened so far (1 after the first; +1 per re-open).
  uint64_t opened() const { return opened_.load(); }
  // Tier-move requests answered; index batches applied.
  uint64_t requests() const { return requests_.load(); }
  uint64_t batches() const { return batches_.load(); }

 private:
  void Run();    // opens streams, reports, applies batches, answers tier moves
  void Watch();  // cancels a stream whose segment id or client id went stale

  RemoteMaster& master_;
  const uint64_t handle_;
  const SegmentLinkOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                              // guarded by mu_
  grpc::ClientContext* context_ = nullptr;         // the open stream's; guarded by mu_
  uint64_t bound_segment_ = 0, bound_client_ = 0;  // what it was opened for; guarded by mu_
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> opened_{0};
  std::atomic<uint64_t> requests_{0};
  std::atomic<uint64_t> batches_{0};
  std::thread runner_;
  std::thread watcher_;
};

}  // namespace tierkv
