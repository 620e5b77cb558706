// SegmentFeed: the master's side of a store's segment index (master/segment_index_types.h).
//
// One per segment whose owner keeps an index (mounted with MountOptions::index_stream). It
// collects, in order, what the owner's index must learn — commits (PutEnd, PromoteEnd), disk
// replicas attached (demotion, write-behind, warm restart) and dropped, and every free of the
// segment's allocator (it is the allocator's FreeFence) — into batches that the segment's stream
// (rpc: the TierMoves stream of the store's SegmentLink) sends and the owner acknowledges.
//
// Ordering rule: a freed range is quarantined in the allocator until the owner acknowledges the
// batch that carried its free, so an index entry can never point at another object's bytes.
// While no stream is attached, events are dropped (the next stream starts with a reconciliation
// of the owner's report against the master's table, MasterService::ReconcileSegment), but frees
// still get tickets, released by the first acknowledgment of the next stream.
//
// Thread-safety: thread-safe. Its mutex is a leaf: events arrive under shard locks (commits)
// or from Allocation destructors (frees), and nothing is called while holding it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/clock.h"
#include "master/segment_index_types.h"
#include "memory/offset_allocator.h"

namespace tierkv {

class SegmentFeed final : public FreeFence {
 public:
  // Batches in flight (sent, not yet acknowledged) before Next waits for an acknowledgment:
  // under load the events of one round trip ride in one batch.
  static constexpr uint64_t kWindow = 4;
  // Most events in one part of a batch (keeps each stream message well under gRPC's limit).
  static constexpr size_t kMaxEventsPerPart = 8192;

  // `linger`: how long Next lets the open batch gather events after its first one before it
  // sends it (0: at once). Under load one message then carries many PutEnds' commits instead of
  // one each: fewer stream messages, acknowledgments and wake-ups on both ends. It delays only
  // the store's learning of a commit (a plain put lost in a failover meanwhile is a miss, as
  // before) and the reuse of freed ranges; whoever waits on the feed (Barrier, Flush) cuts it.
  explicit SegmentFeed(std::weak_ptr<OffsetAllocator> allocator,
                       std::chrono::microseconds linger = std::chrono::microseconds(0))
      : allocator_(std::move(allocator)), linger_(linger) {}

  // --- Events (no-ops while no stream is attached, except that frees get their ticket) ---
  void Committed(IndexEntry entry);
  void DiskAttached(IndexEntry entry);
  void DiskDropped(std::string key, const DiskLocation& location);
  // The memory replica at `offset` no longer backs its key (an upsert replaced it), though its
  // range stays allocated until readers' leases end: the owner's index drops the entry now (a
  // free on the wire, with no ticket: the allocator's own free follows later).
  void Forgotten(uint64_t offset);
  uint64_t OnFree(uint64_t offset, uint64_t size) override;

  // --- The stream ---
  // A stream is attached: events are kept from now on. Returns its generation (1 for the
  // segment's first stream, whose report is adopted; later ones are only reconciled). A newer
  // Attach supersedes an older one: calls naming an older generation are ignored.
  uint64_t Attach();
  // Puts `delta` (the reconciliation) ahead of the events already in the open batch.
  void Prepend(uint64_t generation, IndexBatch delta);
  // The next batch to send (sealed, with its seq; or its next part, `more` set when others
  // follow), waiting up to `timeout` for events, for the window and for the linger (unless a
  // flush was asked for, or the batch holds a part's worth of events); nullopt on timeout, or
  // once this generation is detached or superseded, or the feed closed.
  std::optional<IndexBatch> Next(uint64_t generation, Millis timeout);
  // The owner applied batches up to `seq`: their frees become reusable.
  void Acked(uint64_t generation, uint64_t seq);
  // The stream ended: events are dropped until the next Attach; Next returns nullopt.
  void Detach(uint64_t generation);
  // The segment is unmounted: nothing is kept or sent any more.
  void Close();

  bool attached() const;
  // Waits up to `timeout` until every batch sealed so far is acknowledged (tests).
  bool WaitAcked(Millis timeout);
  // The batch that carries every event recorded so far: its seq (the open batch's, numbered
  // now if it has none), or the last one sent when nothing is pending; 0 without a stream.
  // WaitAckedThrough(seq) then waits until the owner applied it (or a later batch: a new
  // stream's reconciliation covers what an ended one left unacknowledged): true once it has,
  // false on timeout or once the feed is closed.
  uint64_t Barrier();
  // The open batch goes without waiting for the linger (a put waiting for quarantined frees).
  void Flush();
  bool WaitAckedThrough(uint64_t seq, Millis timeout);
  uint64_t batches_sent() const { return batches_sent_.load(std::memory_order_relaxed); }
  uint64_t events_sent() const { return events_sent_.load(std::memory_order_relaxed); }
  uint64_t acked_seq() const;

 private:
  // An event was added to the open batch (under mu_): starts the linger at the batch's first
  // one. True when the sender must be woken (it waits for a first event, or the batch is full).
  bool NoteEvent();
  // The open batch may go now (under mu_): something to send, room in the window, and the
  // linger over, or cut.
  bool Ripe(SteadyTime now) const;
  // Empties the open batch (under mu_), numbered `seq` (0: the next Next numbers it), and ends
  // its linger.
  void ClearOpen(uint64_t seq);

  const std::weak_ptr<OffsetAllocator> allocator_;
  const std::chrono::microseconds linger_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  IndexBatch open_;     // the batch events go into; open_.seq is its number; mu_
  uint64_t sent_ = 0;   // highest seq handed to the stream; mu_
  uint64_t acked_ = 0;  // highest seq acknowledged, or settled by a (de)tach; mu_
  // Highest seq the owner really applied (Acked only; a detach settles acked_ for the window,
  // not this): what WaitAckedThrough waits for. Seqs grow across streams. mu_
  uint64_t confirmed_ = 0;
  bool attached_ = false;    // mu_
  bool closed_ = false;      // mu_
  uint64_t generation_ = 0;  // of the attached (or last) stream; mu_
  // When the open batch got its first event since the last send (unset: none yet); mu_
  std::optional<SteadyTime> pending_since_;
  bool flush_ = false;  // Barrier or Flush: the open batch goes without lingering; mu_
  std::atomic<uint64_t> batches_sent_{0};
  std::atomic<uint64_t> events_sent_{0};
};

// A disk replica's record as its owner's index knows it: destroying the claim (the replica is
// dropped, however) tells the owner to forget the record. Move-only through unique_ptr.
class DiskClaim {
 public:
  DiskClaim(std::shared_ptr<SegmentFeed> feed, std::string key, const DiskLocation& location)
      : feed_(std::move(feed)), key_(std::move(key)), location_(location) {}
  ~DiskClaim() {
    if (feed_) feed_->DiskDropped(std::move(key_), location_);
  }
  DiskClaim(const DiskClaim&) = delete;
  DiskClaim& operator=(const DiskClaim&) = delete;

 private:
  std::shared_ptr<SegmentFeed> feed_;
  std::string key_;
  DiskLocation location_;
};

}  // namespace tierkv
