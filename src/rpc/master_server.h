// The master as a gRPC service (`tierkv master`).
//
// MasterRpcHandler turns each request of proto/tierkv/master.proto into calls on a
// MasterService and a ClientRegistry and fills the response. It validates every request first
// (repeated fields of mismatched lengths, batches over wire::kMaxBatchKeys, over-long names,
// unknown client ids, segments the caller does not own) and answers a bad one with an error —
// whole-call or per key — never a crash. It holds no gRPC state, so the fuzz targets drive it
// directly with parsed messages.
//
// MasterServer owns the gRPC server (synchronous API) and the current *term*: a MasterService, a
// ClientRegistry, their handler and two background threads — maintenance (abandoned puts,
// watermark eviction) and the client reaper, which every client_ttl/4 unmounts the segments of
// clients silent for client_ttl (their replicas are dropped, whole groups) and logs each expiry.
// Without high availability one term runs from Start to Shutdown. With it (`standby`), terms
// follow the etcd election (BeginTerm/EndTerm): between terms, and as soon as a term's lease is
// no longer valid, every call answers not_leader (CallStatus), and every answer carries the
// term's epoch. Given a MetricsRegistry
// (MasterServerOptions::metrics) it adds two collectables to it while it runs: the master's
// figures, read at scrape time (MasterCollector), and a latency histogram per RPC method,
// recorded around each call (tierkv_master_rpc_duration_seconds{method}); docs/metrics.md.
// Thread-safety: thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/cluster_token.h"
#include "common/periodic_thread.h"
#include "master/client_registry.h"
#include "master/master_service.h"
#include "metrics/metrics_registry.h"
#include "rpc/tier_moves.h"
#include "tierkv/master.pb.h"
#include "tierkv/status.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tierkv {

class AuthCollector;
class LatencyHistograms;

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

// What fences a leader's term (tierkv master --ha; rpc/leader_election.h): Valid() turns false
// the moment the leader's etcd lease may have run out, so a deposed leader stops answering
// before another one can be elected. Thread-safety: Valid() is called from every RPC thread.
class TermLease {
 public:
  virtual ~TermLease() = default;
  virtual bool Valid() const = 0;
};

// A tenant's credential (tierkv master --tenants-file): calls carrying its token act in its key
// namespace only.
struct TenantCredential {
  std::string name;
  std::string prefix;  // kKeyNamespaceMark + name + kKeyNamespaceMark
  std::shared_ptr<const TokenSet> tokens;
};

struct MasterServerOptions {
  std::string host = "127.0.0.1";  // address to bind ("0.0.0.0" = every interface)
  int port = 50051;                // 0 = a free port, chosen by the kernel
  MasterOptions master;
  Millis client_ttl{10000};  // a client silent this long is expired
  // How long a demotion waits for a store to write to its SSD tier before the objects count as
  // not written (TierMoves stream).
  Millis tier_move_timeout{30000};
  // How often maintenance runs (abandoned puts, eviction); 0 = MaintenancePeriod(master), as
  // in embedded mode.
  Millis maintenance_period{0};
  // Where the server's metrics go (served by a MetricsServer); null = no metrics, and no
  // timing of calls. The server removes what it added in Shutdown().
  std::shared_ptr<MetricsRegistry> metrics;
  // Told to every client at registration (master/master_service.h).
  ClientDefaults client_defaults;
  // The cluster token (common/cluster_token.h): every call must carry an accepted one; null =
  // none (whoever reaches the port is trusted).
  std::shared_ptr<const TokenSet> tokens;
  // The stores' credential: when set, only a caller presenting it may mount a segment, open a
  // segment's TierMoves stream or report its disk replicas (tokens' holders make requests
  // only); null = every holder of `tokens` may. Needs `tokens`.
  std::shared_ptr<const TokenSet> store_tokens;
  // Tenants (need `tokens`): each token acts in its tenant's keys only; with any tenant
  // configured the cluster token acts in the default tenant's keys (those outside every
  // namespace), and whole-cluster calls need `admin_tokens` (or a store's).
  std::vector<TenantCredential> tenants;
  std::shared_ptr<const TokenSet> admin_tokens;
  // TLS (PEM contents): certificate and key ("" = plaintext), and the CA that signs client
  // certificates: given, every client must present one it signed (mutual TLS).
  std::string tls_cert_pem;
  std::string tls_key_pem;
  std::string tls_ca_pem;
  // A connection that has not finished its handshake within handshake_timeout, or has carried
  // no call for idle_timeout, is closed.
  Millis handshake_timeout{10000};
  Millis idle_timeout{60000};
  // High availability: start as a standby. Every call answers not_leader until BeginTerm (the
  // election made this master the leader); each term has a fresh state.
  bool standby = false;
};

class MasterServer {
 public:
  // Binds and starts serving (a standby: answering not_leader). INVALID_PARAMS for bad
  // options; RPC_FAIL if the address cannot be bound (port in use, not a local address).
  static Result<std::unique_ptr<MasterServer>> Start(MasterServerOptions options);
  ~MasterServer();
  MasterServer(const MasterServer&) = delete;
  MasterServer& operator=(const MasterServer&) = delete;

  // Removes its metrics from the registry, stops accepting calls, finishes the ones in flight
  // (up to 1 s) and joins the background threads. Idempotent.
  void Shutdown();

  // High availability. BeginTerm: this master leads `epoch` from now on, with a fresh state
  // (as a restarted master: the stores' reports rebuild it); every call checks `lease` before
  // it runs and before it answers, and answers not_leader once it is invalid. EndTerm: calls
  // answer not_leader at once, the term's streams are cancelled and its state goes once the
  // calls in flight are done. Both are no-ops on a server started without `standby`.
  void BeginTerm(uint64_t epoch, std::shared_ptr<const TermLease> lease);
  void EndTerm();
  // What a standby tells callers about the leader (Stats answers): its address and epoch.
  void SetLeader(const std::string& address, uint64_t epoch);
  // Whether a term is running and its lease is valid (always true without `standby`).
  bool leading() const;
  uint64_t epoch() const;  // of the current term (0 without `standby`, or between terms)
  // Calls refused for a missing or wrong cluster token, since Start.
  uint64_t unauthenticated() const { return unauthenticated_.load(std::memory_order_relaxed); }

  const std::string& host() const { return options_.host; }
  int port() const { return port_; }
  std::string address() const;  // host:port
  // The current term's state (tests, benches): only while leading() (always without standby).
  MasterService& master();
  ClientRegistry& clients();
  MasterRpcHandler& handler();
  // The names of the mounted segments ("<host>:<pid>:<n>", without the endpoints the mounted
  // names carry after '@'), for the HTTP page /get_all_segments; empty between terms.
  std::vector<std::string> SegmentNames() const;

 private:
  class Service;
  struct Term;
  explicit MasterServer(MasterServerOptions options);
  std::shared_ptr<Term> NewTerm(uint64_t epoch, std::shared_ptr<const TermLease> lease);
  std::shared_ptr<Term> CurrentTerm() const;
  void LeaderHint(std::string* address, uint64_t* epoch) const;

  MasterServerOptions options_;
  const uint64_t incarnation_;
  std::shared_ptr<LatencyHistograms> rpc_latency_;  // in options_.metrics, if any
  std::shared_ptr<AuthCollector> auth_collector_;   // in options_.metrics, if any
  std::atomic<uint64_t> unauthenticated_{0};
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  mutable std::mutex term_mu_;      // a leaf lock: guards the pointer and the leader hint
  std::shared_ptr<Term> term_;      // guarded by term_mu_; null between terms
  std::string leader_hint_;         // guarded by term_mu_
  uint64_t leader_hint_epoch_ = 0;  // guarded by term_mu_
  std::once_flag shutdown_once_;
};

// A random non-zero 64-bit value identifying one master process.
uint64_t NewIncarnation();

}  // namespace tierkv
