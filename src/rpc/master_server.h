// The master as a gRPC service (`tierkv master`).
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
#include "master/master_service.h"
#include "metrics/metrics_registry.h"
#include "rpc/master_auth.h"
#include "rpc/master_rpc_handler.h"
#include "tierkv/master.pb.h"
#include "tierkv/status.h"

namespace grpc {
class Server;
}  // namespace grpc

namespace tierkv {

class AuthCollector;
class MetaServer;
class LatencyHistograms;

// What fences a leader's term (tierkv master --ha; rpc/leader_election.h): Valid() turns false
// the moment the leader's etcd lease may have run out, so a deposed leader stops answering
// before another one can be elected. Thread-safety: Valid() is called from every RPC thread.
class TermLease {
 public:
  virtual ~TermLease() = default;
  virtual bool Valid() const = 0;
};

struct MasterServerOptions {
  std::string host = "127.0.0.1";  // address to bind ("0.0.0.0" = every interface)
  int port = 50051;                // 0 = a free port, chosen by the kernel
  // The metadata channel (rpc/meta_protocol.h) on `host`: 0 = a free port chosen by the
  // kernel, -1 = none. Told to clients at registration. Not started with TLS (it has none).
  int meta_port = 0;
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
  // The metadata channel's port (0: none) and the calls it served since Start.
  int meta_port() const;
  uint64_t meta_calls() const;

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
  class MetaService;
  struct Term;
  explicit MasterServer(MasterServerOptions options);
  std::shared_ptr<Term> NewTerm(uint64_t epoch, std::shared_ptr<const TermLease> lease);
  std::shared_ptr<Term> CurrentTerm() const;
  void LeaderHint(std::string* address, uint64_t* epoch) const;

  MasterServerOptions options_;
  const MasterAuth auth_;  // from options_' credentials
  const uint64_t incarnation_;
  std::shared_ptr<LatencyHistograms> rpc_latency_;  // in options_.metrics, if any
  std::shared_ptr<AuthCollector> auth_collector_;   // in options_.metrics, if any
  std::atomic<uint64_t> unauthenticated_{0};
  std::atomic<int64_t> last_auth_log_s_{0};  // the second of the last refusal logged
  // Counts a refused call or connection; logs at most once a second (the peer, never a token).
  void CountUnauthenticated(const std::string& peer);
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetaService> meta_service_;
  std::unique_ptr<MetaServer> meta_server_;
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
