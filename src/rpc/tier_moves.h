// Tier moves across processes, the master's side: how `tierkv master` has a store write objects
// to the store's SSD tier (the TierMoves stream of proto/tierkv/master.proto). The store's side
// is SegmentLink (rpc/segment_link.h), which also carries the store's segment index.
//
// The master never touches object bytes; when it demotes or writes behind objects of a segment
// whose owner has an SSD tier it calls that segment's TierMover (master/tier_mover.h). For a
// segment of another process that mover is a RemoteTierMover: it writes the items on the
// stream the owner opened and waits for the owner's answer. The owner's side is a SegmentLink:
// a thread that keeps the stream open (re-opening it after a master restart or a re-mount) and
// answers each request with the store's LocalTierMover.
//
// Failure: a stream that ends, or a request not answered within the timeout, fails the items
// with TRANSFER_FAIL; the master then treats them as a failed tier write (demotion drops them,
// whole groups). A late answer is ignored. The record the owner may still write is orphaned:
// nothing points at it, and its region is reused in turn.
// Thread-safety: both classes are thread-safe.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/tier_mover.h"
#include "tierkv/master.pb.h"

namespace tierkv {

// The master's side: one per open stream.
class RemoteTierMover final : public TierMover {
 public:
  // `write` sends one request on the stream (false when the stream is broken); it is called
  // with a mutex held, never concurrently. `owner` names the store in messages.
  RemoteTierMover(std::string owner, Millis timeout,
                  std::function<bool(const rpc::TierMoveRequest&)> write);
  ~RemoteTierMover() override;

  std::vector<Result<DiskLocation>> Demote(const std::vector<DemoteItem>& items) override;

  // An answer read from the stream. One for no request in flight (late, or made up) is
  // ignored and logged; one with the wrong number of results fails its request with RPC_FAIL.
  void Deliver(const rpc::TierMoveReply& reply);
  // Tells the owner its stream is accepted (an empty request, request_id 0), once the mover is
  // attached to the segment; false when the stream is broken or closed.
  bool Announce();
  // The stream ended: fails the requests in flight and every later Demote; once it returns,
  // `write` is never called again.
  void Close(const std::string& why);

 private:
  struct Waiter {
    size_t items = 0;
    bool done = false;
    std::vector<Result<DiskLocation>> results;
  };

  const std::string owner_;
  const Millis timeout_;
  const std::function<bool(const rpc::TierMoveRequest&)> write_;
  std::mutex write_mu_;  // serialises write_ and guards closed_ for it
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<uint64_t, Waiter*> waiting_;  // guarded by mu_
  uint64_t next_id_ = 1;                 // guarded by mu_
  bool closed_ = false;                  // guarded by mu_ and write_mu_ (both to set)
  std::string why_closed_;               // guarded by mu_
};

}  // namespace tierkv
