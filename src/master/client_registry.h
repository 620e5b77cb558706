// ClientRegistry: which clients (requesters and stores) a master process knows, when each was
// last heard from, and which segments each one owns.
//
// A client registers (naming its host) and gets an id; it heartbeats with that id. A client
// silent for `ttl` is expired: ExpireSilent() forgets it and returns its segments, which the
// caller unmounts (MasterService::UnmountSegment drops their replicas). An id the registry
// does not know — expired, or issued by an earlier master process — is refused, which tells
// the client to register again and re-mount its segments.
//
// Ids start at a random base (`id_base`, default random) so that the ids of a restarted master
// never collide with those of the previous one. The registry does not touch the master: it is
// a plain class, unit-tested with a ManualClock. Thread-safety: thread-safe.
//
// Transfer bytes: a heartbeat may carry the client's cumulative bytes per transport; the
// registry adds what each one grew by since that client's last report to master-wide totals
// (TransferTotals), which therefore only grow, and survive the client's expiry.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "master/segment_registry.h"
#include "tierkv/status.h"
#include "transfer/transfer_counters.h"

namespace tierkv {

using ClientId = uint64_t;

struct ClientInfo {
  ClientId id = 0;
  std::string host;
  SteadyTime registered{};
  SteadyTime last_seen{};
  std::vector<SegmentId> segments;  // in mount order
  // The last transfer bytes it reported, per Transport: read, written.
  std::array<std::pair<uint64_t, uint64_t>, kTransportNames.size()> reported{};
};

// A client expired by ExpireSilent.
struct ExpiredClient {
  ClientId id = 0;
  std::string host;
  Millis silent_for{0};
  std::vector<SegmentId> segments;  // to unmount
};

class ClientRegistry {
 public:
  // `ttl` > 0. `id_base` 0 = a random base.
  ClientRegistry(const Clock* clock, Millis ttl, uint64_t id_base = 0);

  // A new client; never returns 0 or an id returned before by this registry.
  ClientId Register(std::string host);
  // Forgets a client (a clean shutdown); returns its segments (to unmount), or nullopt if
  // unknown.
  std::optional<std::vector<SegmentId>> Unregister(ClientId id);
  // Records a heartbeat. False if the id is unknown (the client must register again).
  // `transfers`: the client's cumulative bytes per transport; entries naming an unknown
  // transport are ignored. A count lower than the last one is taken as a restart from 0.
  bool Heartbeat(ClientId id, const std::vector<TransferCount>& transfers = {});
  bool Known(ClientId id) const;

  // Records that `client` owns `segment`. INVALID_PARAMS (unknown client) if the client is
  // not registered (then the caller unmounts the segment again); SEGMENT_ALREADY_EXISTS if a
  // client already owns that segment id.
  Status AddSegment(ClientId client, SegmentId segment);
  // Forgets the segment of `client`. INVALID_PARAMS for an unknown client, SEGMENT_NOT_FOUND
  // if the client does not own it.
  Status RemoveSegment(ClientId client, SegmentId segment);
  // True if the client is registered and owns the segment.
  bool Owns(ClientId client, SegmentId segment) const;
  // The owner of a segment, or 0.
  ClientId OwnerOf(SegmentId segment) const;

  // Removes every client silent for at least ttl and returns them with their segments.
  std::vector<ExpiredClient> ExpireSilent();

  std::optional<ClientInfo> Find(ClientId id) const;
  size_t size() const;
  uint64_t expired_total() const;
  // Bytes moved by every client since this registry started, per transport (all four, in
  // kTransportNames order).
  std::vector<TransferCount> TransferTotals() const;
  Millis ttl() const { return ttl_; }

 private:
  const Clock* const clock_;
  const Millis ttl_;
  mutable std::mutex mu_;
  ClientId next_id_;                                                            // guarded by mu_
  std::map<ClientId, ClientInfo> clients_;                                      // guarded by mu_
  std::map<SegmentId, ClientId> owners_;                                        // guarded by mu_
  uint64_t expired_total_ = 0;                                                  // guarded by mu_
  std::array<std::pair<uint64_t, uint64_t>, kTransportNames.size()> totals_{};  // guarded by mu_
};

}  // namespace tierkv
