// MasterRpcHandler: the master's RPCs on a MasterService, without any transport.
//
// It turns each request of proto/tierkv/master.proto into calls on a
// MasterService and a ClientRegistry and fills the response. It validates every request first
// (repeated fields of mismatched lengths, batches over wire::kMaxBatchKeys, over-long names,
// unknown client ids, segments the caller does not own) and answers a bad one with an error —
// whole-call or per key — never a crash. It holds no gRPC state, so the fuzz targets drive it
// directly with parsed messages.
//
// Thread-safety: thread-safe (the MasterService and ClientRegistry are).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "master/client_registry.h"
#include "master/master_service.h"
#include "rpc/tier_moves.h"
#include "tierkv/master.pb.h"
#include "tierkv/status.h"

namespace tierkv {

class MasterRpcHandler {
 public:
  MasterRpcHandler(MasterService& master, ClientRegistry& clients, uint64_t incarnation);

  void RegisterClient(const rpc::RegisterClientRequest& request,
                      rpc::RegisterClientResponse* response);
  void Heartbeat(const rpc::HeartbeatRequest& request, rpc::HeartbeatResponse* response);
  void UnregisterClient(const rpc::UnregisterClientRequest& request, rpc::StatusResponse* response);
  void MountSegment(const rpc::MountSegmentRequest& request, rpc::MountSegmentResponse* response);
  void UnmountSegment(const rpc::UnmountSegmentRequest& request, rpc::StatusResponse* response);

  void PutStart(const rpc::PutStartRequest& request, rpc::PlacementResponse* response);
  void PutEnd(const rpc::PutEndRequest& request, rpc::BatchResponse* response);
  void PutRevoke(const rpc::PutRevokeRequest& request, rpc::BatchResponse* response);
  void Exists(const rpc::ExistsRequest& request, rpc::ExistsResponse* response);
  void GetReplicas(const rpc::GetReplicasRequest& request, rpc::GetReplicasResponse* response);
  void Remove(const rpc::RemoveRequest& request, rpc::BatchResponse* response);
  void RemoveAll(const rpc::RemoveAllRequest& request, rpc::CountResponse* response);
  void RemoveByRegex(const rpc::RemoveByRegexRequest& request, rpc::CountResponse* response);
  void ClearReplicas(const rpc::ClearReplicasRequest& request, rpc::BatchResponse* response);

  void DropDiskReplicas(const rpc::DropDiskReplicasRequest& request, rpc::CountResponse* response);
  void AddDiskReplicas(const rpc::AddDiskReplicasRequest& request, rpc::BatchResponse* response);
  void CopyToDisk(const rpc::CopyToDiskRequest& request, rpc::BatchResponse* response);
  void PromoteStart(const rpc::PromoteStartRequest& request, rpc::PlacementResponse* response);
  void PromoteEnd(const rpc::PromoteEndRequest& request, rpc::BatchResponse* response);

  void Stats(const rpc::StatsRequest& request, rpc::StatsResponse* response);

  // TierMoves, the stream's start: checks the owner's first message (a registered client that
  // owns the segment) and attaches to the segment a RemoteTierMover that sends with `write`
  // (none — a null mover — for an index stream without a tier: hello.has_index, !has_tier).
  // Errors: the CallStatus's (unknown client, SEGMENT_NOT_FOUND), INVALID_PARAMS for a first
  // message that carries results.
  Result<std::shared_ptr<RemoteTierMover>> OpenTierMoves(
      const rpc::TierMoveReply& hello, std::function<bool(const rpc::TierMoveRequest&)> write);
  // The stream ended: fails what waits on `mover` and detaches it (if still attached).
  void CloseTierMoves(uint32_t segment, const std::shared_ptr<RemoteTierMover>& mover,
                      const std::string& why);
  // How long a tier move waits for the owner's answer (default 30 s).
  void set_tier_move_timeout(Millis timeout) { tier_move_timeout_ = timeout; }
  void set_client_defaults(ClientDefaults defaults) { client_defaults_ = std::move(defaults); }

  // Expires silent clients and unmounts their segments (the reaper calls this). Returns the
  // number of clients expired.
  size_t ReapSilentClients();

  uint64_t incarnation() const { return incarnation_; }

  // While alive, the calls this thread handles may act in the key namespace `scope` only (a
  // tenant's prefix; "" = keys outside every namespace); null = anywhere. Keys outside it are
  // refused with UNAUTHENTICATED; RemoveAll, RemoveByRegex and Stats reach that namespace only.
  class CallScope {
   public:
    explicit CallScope(const std::string* scope);
    ~CallScope();
    CallScope(const CallScope&) = delete;
    CallScope& operator=(const CallScope&) = delete;
  };

 private:
  // Whole-call checks shared by the handlers; false (and `status` set) to refuse the call.
  bool Keys(const rpc::KeyBatch& batch, std::vector<std::string>* keys,
            rpc::CallStatus* status) const;
  bool CheckOwner(uint64_t client, uint32_t segment, rpc::CallStatus* status) const;

  MasterService& master_;
  ClientRegistry& clients_;
  const uint64_t incarnation_;
  Millis tier_move_timeout_{30000};
  ClientDefaults client_defaults_;
};

}  // namespace tierkv
