// Tier moves across processes, the store's side: TierMoveLink keeps the TierMoves stream to the
// master open and writes what the master demotes into the store's SSD tier. The master's side,
// and the failure rules, are in rpc/tier_moves.h.
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

namespace grpc {
class ClientContext;
}  // namespace grpc

namespace tierkv {

class RemoteMaster;

// The owner's side: serves the master's tier moves for one of its segments.
class TierMoveLink {
 public:
  // Keeps a TierMoves stream open on `master`'s channel for the segment `handle` (as
  // MountSegment returned it; followed across re-mounts) and answers each request with
  // `local`. Retries every `retry` while the master is unreachable or does not know the
  // segment yet. Never fails: its state is in connected().
  // `write_behind`: ask the master to copy each put on the segment to the tier soon after its
  // PutEnd (offload_write_policy write_behind).
  TierMoveLink(RemoteMaster& master, uint64_t handle, std::shared_ptr<TierMover> local,
               bool write_behind = false, Millis retry = Millis(200));
  ~TierMoveLink();  // closes the stream and joins the threads
  TierMoveLink(const TierMoveLink&) = delete;
  TierMoveLink& operator=(const TierMoveLink&) = delete;

  // Whether a stream is open and the master accepted it (it attached the tier to the segment:
  // from now on its demotions come here).
  bool connected() const { return connected_.load(); }
  // Streams opened so far (1 after the first; +1 per re-open).
  uint64_t opened() const { return opened_.load(); }
  // Requests answered, and items written to the tier.
  uint64_t requests() const { return requests_.load(); }

 private:
  void Run();    // opens streams and answers requests
  void Watch();  // cancels a stream whose segment id or client id went stale

  RemoteMaster& master_;
  const uint64_t handle_;
  const std::shared_ptr<TierMover> local_;
  const bool write_behind_;
  const Millis retry_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                              // guarded by mu_
  grpc::ClientContext* context_ = nullptr;         // the open stream's; guarded by mu_
  uint64_t bound_segment_ = 0, bound_client_ = 0;  // what it was opened for; guarded by mu_
  std::atomic<bool> connected_{false};
  std::atomic<uint64_t> opened_{0};
  std::atomic<uint64_t> requests_{0};
  std::thread runner_;
  std::thread watcher_;
};

}  // namespace tierkv
