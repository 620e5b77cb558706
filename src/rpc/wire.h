// Conversions between tierkv's master types and the messages of proto/tierkv/master.proto.
//
// Encoders are used by the server (MasterRpcHandler), decoders by the client (RemoteMaster).
// Decoders never trust a response: a response with the wrong number of results, an index out
// of range or an unknown replica tier fails the affected keys (or the whole batch) with
// RPC_FAIL instead of crashing or inventing data. They are fuzzed (fuzz/).
// Thread-safety: free functions over values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/clock.h"
#include "master/master_service.h"
#include "tierkv/master.pb.h"
#include "tierkv/status.h"
#include "tierkv/types.h"

namespace tierkv::wire {

// Most keys in one batch call; larger batches are refused whole with INVALID_PARAMS.
inline constexpr size_t kMaxBatchKeys = size_t{1} << 20;
// Longest segment name and host name accepted by the master.
inline constexpr size_t kMaxSegmentNameLength = 4096;
inline constexpr size_t kMaxHostLength = 255;
// Largest gRPC message, both ways (a 1 M-key batch of long keys fits; 64 MiB).
inline constexpr int kMaxMessageBytes = 64 << 20;

// ---- Encoding (server side) ------------------------------------------------------------------

void SetStatus(rpc::CallStatus* out, const Status& status);
void SetUnknownClient(rpc::CallStatus* out, uint64_t client_id);
void EncodeResults(const std::vector<Status>& statuses, rpc::KeyResults* out);
void EncodeReplica(const ReplicaLocation& replica, rpc::Replica* out);
// Per-key codes and placements of PutStart/PromoteStart.
void EncodePlacements(const std::vector<Result<PutStartResult>>& results,
                      rpc::PlacementResponse* out);
// Per-key codes and replicas; lease deadlines become the time left after `now`.
void EncodeReplicas(const std::vector<Result<ObjectReplicas>>& results, SteadyTime now,
                    rpc::GetReplicasResponse* out);
void EncodeConfig(const ReplicateConfig& config, rpc::ReplicateConfig* out);
// INVALID_PARAMS if its group ids are not a well-formed KeyBatch.
Status DecodeConfig(const rpc::ReplicateConfig& config, ReplicateConfig* out);
void EncodeStats(const MasterStats& stats, rpc::StatsResponse* out);
MasterStats DecodeStats(const rpc::StatsResponse& in);

// ---- Keys (both sides) -----------------------------------------------------------------------

// Packs keys into one KeyBatch (their bytes back to back, and their sizes).
void EncodeKeys(const std::vector<std::string>& keys, rpc::KeyBatch* out);
// Unpacks a KeyBatch. INVALID_PARAMS if it holds more than kMaxBatchKeys keys, or its sizes do
// not add up to its data exactly; `out` is then empty.
Status DecodeKeys(const rpc::KeyBatch& batch, std::vector<std::string>* out);

// ---- Decoding (client side) ------------------------------------------------------------------

// The whole-call status of a response (OK when code is 0).
Status CallStatusOf(const rpc::CallStatus& status);
// Per-key statuses of a batch of `n` keys. A whole-call error, or results that do not have
// `n` codes, fail every key (the latter with RPC_FAIL).
std::vector<Status> DecodeResults(const rpc::CallStatus& status, const rpc::KeyResults& results,
                                  size_t n, const char* rpc_name);
std::vector<int> DecodeExists(const rpc::ExistsResponse& response, size_t n);
std::vector<Result<PutStartResult>> DecodePlacements(const rpc::PlacementResponse& response,
                                                     size_t n, const char* rpc_name);
// `sent`: when the request left (lease deadlines are counted from it, on the caller's clock).
std::vector<Result<ObjectReplicas>> DecodeReplicas(const rpc::GetReplicasResponse& response,
                                                   size_t n, SteadyTime sent);
// A replica location; false for an unknown tier.
bool DecodeReplica(const rpc::Replica& in, ReplicaLocation* out);

}  // namespace tierkv::wire
