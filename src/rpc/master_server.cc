#include "rpc/master_server.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>

#include "common/key.h"
#include "metrics/auth_collector.h"
#include "metrics/latency_histograms.h"
#include "metrics/master_collector.h"
#include "rpc/channel_security.h"
#include "rpc/index_wire.h"
#include "rpc/meta_server.h"
#include "rpc/wire.h"
#include "tierkv/master.grpc.pb.h"

namespace tierkv {

uint64_t NewIncarnation() {
  std::random_device device;
  uint64_t v = (static_cast<uint64_t>(device()) << 32) ^ device() ^
               static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return v == 0 ? 1 : v;
}

// ---- gRPC service -------------------------------------------------------------------------------

// Every RPC of the Master service: X(Name, Request, Response).
#define TIERKV_MASTER_RPCS(X)                                      \
  X(RegisterClient, RegisterClientRequest, RegisterClientResponse) \
  X(Heartbeat, HeartbeatRequest, HeartbeatResponse)                \
  X(UnregisterClient, UnregisterClientRequest, StatusResponse)     \
  X(MountSegment, MountSegmentRequest, MountSegmentResponse)       \
  X(UnmountSegment, UnmountSegmentRequest, StatusResponse)         \
  X(PutStart, PutStartRequest, PlacementResponse)                  \
  X(PutEnd, PutEndRequest, BatchResponse)                          \
  X(PutRevoke, PutRevokeRequest, BatchResponse)                    \
  X(Exists, ExistsRequest, ExistsResponse)                         \
  X(GetReplicas, GetReplicasRequest, GetReplicasResponse)          \
  X(Remove, RemoveRequest, BatchResponse)                          \
  X(RemoveAll, RemoveAllRequest, CountResponse)                    \
  X(RemoveByRegex, RemoveByRegexRequest, CountResponse)            \
  X(ClearReplicas, ClearReplicasRequest, BatchResponse)            \
  X(DropDiskReplicas, DropDiskReplicasRequest, CountResponse)      \
  X(AddDiskReplicas, AddDiskReplicasRequest, BatchResponse)        \
  X(CopyToDisk, CopyToDiskRequest, BatchResponse)                  \
  X(PromoteStart, PromoteStartRequest, PlacementResponse)          \
  X(PromoteEnd, PromoteEndRequest, BatchResponse)                  \
  X(Stats, StatsRequest, StatsResponse)

namespace {

// The histogram index of each RPC, and its label value.
enum RpcMethod : size_t {
#define TIERKV_RPC_ENUM(Name, Request, Response) kRpc##Name,
  TIERKV_MASTER_RPCS(TIERKV_RPC_ENUM)
#undef TIERKV_RPC_ENUM
};

std::vector<std::string> RpcMethodNames() {
  return {
#define TIERKV_RPC_NAME(Name, Request, Response) #Name,
      TIERKV_MASTER_RPCS(TIERKV_RPC_NAME)
#undef TIERKV_RPC_NAME
  };
}

constexpr char kUnauthenticatedMessage[] =
    "this tierkv master requires the cluster token: the call carried none, or one it does not "
    "accept (config key cluster_token_file, or --token-file)";

// Answers of a master that does not lead, and the epoch stamp of a leader's answers.
template <typename Response>
void AnswerNotLeader(Response* response, const std::string& leader) {
  response->Clear();
  const std::string why =
      leader.empty() ? std::string("this tierkv master is not the leader (no leader known)")
                     : "this tierkv master is not the leader; the leader is " + leader;
  if constexpr (std::is_same_v<Response, rpc::HeartbeatResponse>) {
    response->set_not_leader(true);
  } else {
    rpc::CallStatus* status = response->mutable_status();
    status->set_not_leader(true);
    status->set_code(ToInt(ErrorCode::RPC_FAIL));
    status->set_message(why);
  }
}

template <typename Response>
void StampEpoch(Response* response, uint64_t epoch) {
  if (epoch == 0) return;
  if constexpr (std::is_same_v<Response, rpc::HeartbeatResponse>) {
    response->set_leader_epoch(epoch);
  } else {
    response->mutable_status()->set_leader_epoch(epoch);
  }
}

}  // namespace

// One leadership term: the master state that serves while it lasts (the whole life of a
// server without high availability).
struct MasterServer::Term {
  Term(const MasterServerOptions& o, uint64_t incarnation, uint64_t epoch_in,
       std::shared_ptr<const TermLease> lease_in)
      : epoch(epoch_in),
        lease(std::move(lease_in)),
        master(o.master),
        clients(o.master.clock, o.client_ttl),
        handler(master, clients, incarnation) {}
  bool Valid() const { return lease == nullptr || lease->Valid(); }

  const uint64_t epoch;
  const std::shared_ptr<const TermLease> lease;
  MasterService master;
  ClientRegistry clients;
  MasterRpcHandler handler;
  std::shared_ptr<prometheus::Collectable> collector;  // in the registry while the term runs
  std::unique_ptr<PeriodicThread> maintenance;         // MasterService::RunMaintenance
  std::unique_ptr<PeriodicThread> reaper;              // expires silent clients
};

class MasterServer::Service final : public rpc::Master::Service {
 public:
  // `latency` null: calls are not timed.
  Service(MasterServer& server, LatencyHistograms* latency) : server_(server), latency_(latency) {}

#define TIERKV_RPC(Name, Request, Response)                                             \
  grpc::Status Name(grpc::ServerContext* context, const rpc::Request* request,          \
                    rpc::Response* response) override {                                 \
    const std::string_view secret = PresentedToken(*context);                           \
    if (!auth().Authenticated(secret)) return Unauthenticated(context->peer());         \
    if (!MayCall(secret, kRpc##Name)) return NotAStore(context->peer(), #Name);         \
    Run(kRpc##Name, auth().Scope(secret), &MasterRpcHandler::Name, *request, response); \
    return grpc::Status::OK;                                                            \
  }
  TIERKV_MASTER_RPCS(TIERKV_RPC)
#undef TIERKV_RPC

  // One unary call, after its caller was admitted: in `scope`'s keys, fenced by the term's
  // lease (checked before the call runs and again before it answers), timed.
  template <typename Request, typename Response>
  void Run(RpcMethod method, const std::string* scope,
           void (MasterRpcHandler::*handle)(const Request&, Response*), const Request& request,
           Response* response) {
    MasterRpcHandler::CallScope call_scope(scope);
    const auto start = std::chrono::steady_clock::now();
    std::shared_ptr<Term> term = server_.CurrentTerm();
    if (term == nullptr || !term->Valid()) {
      NotLeader(response);
    } else {
      (term->handler.*handle)(request, response);
      if (!term->Valid()) {
        NotLeader(response);
      } else {
        Stamp(response, *term);
      }
    }
    if (latency_ != nullptr) latency_->Observe(method, std::chrono::steady_clock::now() - start);
  }

  const MasterAuth& auth() const { return server_.auth_; }
  // Calls that give a segment to the pool, or report what a segment holds, need a store's
  // credential.
  bool MayCall(std::string_view secret, RpcMethod method) const {
    const bool store_only = method == kRpcMountSegment || method == kRpcAddDiskReplicas ||
                            method == kRpcDropDiskReplicas;
    return !store_only || auth().IsStore(secret);
  }
  grpc::Status NotAStore(const std::string& peer, const char* method) {
    server_.unauthenticated_.fetch_add(1);
    spdlog::warn("tierkv master: refused {} from {}: it needs a store's credential", method, peer);
    return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                        std::string(method) +
                            " needs a store's credential (the master's --store-token-file): "
                            "this process holds the cluster token of requesters");
  }
  // Counted, and logged at most once a second (with the peer, never the token presented).
  grpc::Status Unauthenticated(const std::string& peer) {
    server_.CountUnauthenticated(peer);
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, kUnauthenticatedMessage);
  }

  grpc::Status TierMoves(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<rpc::TierMoveRequest, rpc::TierMoveReply>* stream) override {
    const std::string_view secret = PresentedToken(*context);
    if (!auth().Authenticated(secret)) return Unauthenticated(context->peer());
    if (!auth().IsStore(secret)) return NotAStore(context->peer(), "TierMoves");
    std::shared_ptr<Term> term = server_.CurrentTerm();
    if (term == nullptr || !term->Valid()) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this tierkv master is not the leader");
    }
    {
      std::lock_guard lock(streams_mu_);
      if (closing_) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "the master is stopping");
      streams_.emplace(context, term.get());
    }
    struct Forget {  // the context leaves the set however the call ends
      Service* self;
      grpc::ServerContext* context;
      ~Forget() {
        std::lock_guard lock(self->streams_mu_);
        self->streams_.erase(context);
      }
    } forget{this, context};
    MasterRpcHandler& h = term->handler;
    MasterService& master = term->master;
    rpc::TierMoveReply hello;
    if (!stream->Read(&hello)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "no first message");
    }
    // Every write on the stream (tier moves, index batches, the accept) goes through this lock.
    std::mutex write_mu;
    auto write = [stream, &write_mu](const rpc::TierMoveRequest& request) {
      std::lock_guard lock(write_mu);
      return stream->Write(request);
    };
    auto mover = h.OpenTierMoves(hello, write);
    if (!mover.ok()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, mover.status().ToString());
    }
    const uint32_t segment = hello.segment_id();
    std::unique_ptr<MasterService::IndexLink> link;
    if (hello.has_index()) {
      auto opened = master.OpenIndexLink(segment);
      if (!opened.ok()) {
        if (*mover) h.CloseTierMoves(segment, *mover, opened.status().ToString());
        return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, opened.status().ToString());
      }
      link = std::move(opened).value();
      // The owner's report comes first; the stream is accepted once it is adopted (or compared).
      rpc::TierMoveReply chunk;
      bool complete = false;
      std::vector<IndexEntry> memory, disk;
      while (!complete && stream->Read(&chunk)) {
        memory.clear();
        disk.clear();
        wire::DecodeIndexReport(chunk.report(), &memory, &disk);
        if (chunk.report().total() > 0) link->Expect(chunk.report().total());
        link->Add(memory, disk);
        complete = chunk.report().last();
      }
      Result<SegmentRecovery> linked =
          complete ? link->Finish()
                   : Result<SegmentRecovery>(Status(ErrorCode::TRANSFER_FAIL,
                                                    "the stream ended during its index report"));
      if (!linked.ok()) {
        link->feed()->Detach(link->generation());
        if (*mover) h.CloseTierMoves(segment, *mover, linked.status().ToString());
        spdlog::warn("segment link {}: {}", segment, linked.status().ToString());
        return grpc::Status(grpc::StatusCode::ABORTED, linked.status().ToString());
      }
    }
    // The owner counts the stream as accepted once it reads this.
    bool announced = false;
    if (*mover) {
      announced = (*mover)->Announce();
    } else {
      announced = write(rpc::TierMoveRequest());
    }
    std::atomic<bool> stop_sending{false};
    std::thread sender;
    if (announced && link) {
      // The index feed: batches in order; a leader whose lease ran out sends nothing more.
      sender = std::thread([&, feed = link->feed(), generation = link->generation()] {
        while (!stop_sending.load()) {
          std::optional<IndexBatch> batch = feed->Next(generation, Millis(100));
          if (!term->Valid()) {
            context->TryCancel();
            return;
          }
          if (!batch) {
            if (!feed->attached()) return;
            continue;
          }
          rpc::TierMoveRequest request;
          wire::EncodeIndexBatch(*batch, request.mutable_index());
          if (!write(request)) {
            context->TryCancel();
            return;
          }
        }
      });
    }
    if (announced) {
      rpc::TierMoveReply reply;
      while (stream->Read(&reply)) {
        if (reply.index_ack() != 0) {
          if (link) link->feed()->Acked(link->generation(), reply.index_ack());
          continue;
        }
        if (*mover) (*mover)->Deliver(reply);
      }
    }
    stop_sending.store(true);
    if (link) link->feed()->Detach(link->generation());
    if (sender.joinable()) sender.join();
    const std::string why = context->IsCancelled() ? "cancelled" : "the store closed it";
    if (*mover) {
      h.CloseTierMoves(segment, *mover, why);
    } else {
      spdlog::info("segment link {}: stream ended ({})", segment, why);
    }
    return grpc::Status::OK;
  }

  // Ends the open TierMoves streams of `term` (all of them when null), and with `closing` refuses
  // new ones (shutdown).
  void CancelStreams(const Term* term, bool closing) {
    std::lock_guard lock(streams_mu_);
    if (closing) closing_ = true;
    for (const auto& [context, of] : streams_) {
      if (term == nullptr || of == term) context->TryCancel();
    }
  }

 private:
  static std::string_view PresentedToken(const grpc::ServerContext& context) {
    const auto& metadata = context.client_metadata();
    auto it = metadata.find(kTokenMetadataKey);
    if (it == metadata.end()) return {};
    return std::string_view(it->second.data(), it->second.size());
  }
  template <typename Response>
  void Stamp(Response* response, const Term& term) {
    StampEpoch(response, term.epoch);
    if constexpr (std::is_same_v<Response, rpc::RegisterClientResponse> ||
                  std::is_same_v<Response, rpc::StatsResponse>) {
      response->set_meta_port(static_cast<uint32_t>(server_.meta_port()));
    }
    if constexpr (std::is_same_v<Response, rpc::StatsResponse>) {
      if (server_.options_.standby) {
        response->set_ha(true);
        response->set_leader(server_.address());
        response->set_leader_epoch(term.epoch);
      }
    }
  }

  template <typename Response>
  void NotLeader(Response* response) {
    std::string leader;
    uint64_t epoch = 0;
    server_.LeaderHint(&leader, &epoch);
    AnswerNotLeader(response, leader);
    if constexpr (std::is_same_v<Response, rpc::StatsResponse>) {
      response->set_ha(true);
      response->set_leader(leader);
      response->set_leader_epoch(epoch);
      response->set_master_incarnation(server_.incarnation_);
    }
  }

  MasterServer& server_;
  LatencyHistograms* const latency_;
  std::mutex streams_mu_;
  std::map<grpc::ServerContext*, const Term*> streams_;  // guarded by streams_mu_
  bool closing_ = false;                                 // guarded by streams_mu_
};

// The metadata channel's calls (rpc/meta_server.h): the same admission, fencing and handlers as
// the gRPC calls of the same names. A connection proved its secret once, at its hello; each call
// checks it again, so a token dropped by a reload (SIGHUP) stops its connections too.
class MasterServer::MetaService final : public MetaServer::Handler {
 public:
  MetaService(MasterServer& server, Service& service) : server_(server), service_(service) {}

  bool token_required() const override { return server_.auth_.required(); }
  std::string MatchMac(const TokenDigest& proof,
                       std::initializer_list<std::string_view> parts) const override {
    return server_.auth_.MatchMac(proof, parts);
  }
  void Refused(const std::string& peer) override { server_.CountUnauthenticated(peer); }

  int32_t Serve(std::string_view secret, const std::string& peer, MetaMethod method,
                std::string_view request, std::string* answer) override {
    if (!server_.auth_.Authenticated(secret)) {
      server_.CountUnauthenticated(peer);
      *answer = kUnauthenticatedMessage;
      return ToInt(ErrorCode::UNAUTHENTICATED);
    }
    switch (method) {
      case MetaMethod::kPutStart:
        return Unary(kRpcPutStart, secret, &MasterRpcHandler::PutStart, request, answer);
      case MetaMethod::kPutEnd:
        return Unary(kRpcPutEnd, secret, &MasterRpcHandler::PutEnd, request, answer);
      case MetaMethod::kPutRevoke:
        return Unary(kRpcPutRevoke, secret, &MasterRpcHandler::PutRevoke, request, answer);
      case MetaMethod::kExists:
        return Unary(kRpcExists, secret, &MasterRpcHandler::Exists, request, answer);
      case MetaMethod::kGetReplicas:
        return Unary(kRpcGetReplicas, secret, &MasterRpcHandler::GetReplicas, request, answer);
      case MetaMethod::kRemove:
        return Unary(kRpcRemove, secret, &MasterRpcHandler::Remove, request, answer);
    }
    *answer = "unknown method " + std::to_string(static_cast<int>(method));
    return ToInt(ErrorCode::INVALID_PARAMS);
  }

 private:
  template <typename Request, typename Response>
  int32_t Unary(RpcMethod rpc, std::string_view secret,
                void (MasterRpcHandler::*handle)(const Request&, Response*), std::string_view bytes,
                std::string* answer) {
    Request request;
    if (!request.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
      *answer = "a malformed " + std::string(request.GetTypeName()) + " (" +
                std::to_string(bytes.size()) + " bytes)";
      return ToInt(ErrorCode::INVALID_PARAMS);
    }
    Response response;
    service_.Run(rpc, server_.auth_.Scope(secret), handle, request, &response);
    if (!response.SerializeToString(answer)) {
      *answer = "cannot encode the " + std::string(response.GetTypeName());
      return ToInt(ErrorCode::INTERNAL_ERROR);
    }
    return 0;
  }

  MasterServer& server_;
  Service& service_;
};

#undef TIERKV_MASTER_RPCS

// ---- MasterServer -------------------------------------------------------------------------------

MasterServer::MasterServer(MasterServerOptions options)
    : options_(std::move(options)),
      auth_(MasterCredentials{options_.tokens, options_.store_tokens, options_.tenants,
                              options_.admin_tokens}),
      incarnation_(NewIncarnation()) {}

void MasterServer::CountUnauthenticated(const std::string& peer) {
  const uint64_t refused = unauthenticated_.fetch_add(1) + 1;
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (last_auth_log_s_.exchange(now) != now) {
    spdlog::warn(
        "tierkv master: refused a call from {}: no valid cluster token ({} refused so far)", peer,
        refused);
  }
}

int MasterServer::meta_port() const { return meta_server_ ? meta_server_->port() : 0; }

uint64_t MasterServer::meta_calls() const { return meta_server_ ? meta_server_->calls() : 0; }

std::shared_ptr<MasterServer::Term> MasterServer::NewTerm(uint64_t epoch,
                                                          std::shared_ptr<const TermLease> lease) {
  MasterServerOptions o = options_;
  // Segment ids of a new term must not alias an earlier term's (or an earlier master's) in
  // requesters' caches: start from a random id (below 2^31, so they stay far from wrapping).
  if (o.master.first_segment_id <= 1) {
    o.master.first_segment_id = static_cast<SegmentId>(NewIncarnation() % (1u << 30)) + 1;
  }
  // Put ids above every earlier master's: the wall clock in microseconds (see MasterOptions).
  if (o.master.first_put_id <= 1) {
    o.master.first_put_id =
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
  }
  auto term = std::make_shared<Term>(o, incarnation_, epoch, std::move(lease));
  term->handler.set_tier_move_timeout(o.tier_move_timeout);
  term->handler.set_client_defaults(o.client_defaults);
  const Millis maint =
      o.maintenance_period.count() > 0 ? o.maintenance_period : MaintenancePeriod(o.master);
  const Millis reap = Millis(std::max<int64_t>(o.client_ttl.count() / 4, 1));
  Term* t = term.get();
  term->maintenance = std::make_unique<PeriodicThread>(maint, [t] {
    if (t->Valid()) t->master.RunMaintenance();
  });
  term->reaper = std::make_unique<PeriodicThread>(reap, [t] {
    if (t->Valid()) t->handler.ReapSilentClients();
  });
  if (o.metrics != nullptr) {
    term->collector = std::make_shared<MasterCollector>(term->master, &term->clients);
    o.metrics->Add(term->collector);
  }
  return term;
}

Result<std::unique_ptr<MasterServer>> MasterServer::Start(MasterServerOptions options) {
  auto bad = [](std::string m) { return Status(ErrorCode::INVALID_PARAMS, std::move(m)); };
  if (options.host.empty()) return bad("host is empty");
  if (options.port < 0 || options.port > 65535) {
    return bad("port " + std::to_string(options.port) + " is not in 0..65535");
  }
  if (options.client_ttl.count() <= 0) return bad("client TTL must be > 0 ms");
  if (options.master.clock == nullptr) options.master.clock = SystemClock::Instance();

  std::unique_ptr<MasterServer> server(new MasterServer(std::move(options)));
  const MasterServerOptions& o = server->options_;
  // IPv6 literals need brackets in a gRPC address.
  const std::string host =
      o.host.find(':') != std::string::npos && o.host.front() != '[' ? "[" + o.host + "]" : o.host;
  const std::string listen = host + ":" + std::to_string(o.port);

  if (o.metrics != nullptr) {
    server->rpc_latency_ = std::make_shared<LatencyHistograms>(
        "tierkv_master_rpc_duration_seconds",
        "Time the master spent in an RPC handler (gRPC's own queueing and transport excluded)",
        "method", RpcMethodNames());
  }
  if (!o.standby) server->term_ = server->NewTerm(0, nullptr);
  server->service_ = std::make_unique<Service>(*server, server->rpc_latency_.get());
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!o.tls_cert_pem.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        o.tls_ca_pem.empty() ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
                             : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    ssl.pem_root_certs = o.tls_ca_pem;
    ssl.pem_key_cert_pairs.push_back({o.tls_key_pem, o.tls_cert_pem});
    credentials = grpc::SslServerCredentials(ssl);
  }
  builder.AddListeningPort(listen, credentials, &server->port_);
  // Connections that never finish their handshake, or carry no call for this long, are closed
  // (a silent connection must not hold a descriptor forever; clients heartbeat every second).
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(o.handshake_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(o.idle_timeout.count()));
  builder.RegisterService(server->service_.get());
  builder.SetMaxReceiveMessageSize(wire::kMaxMessageBytes);
  builder.SetMaxSendMessageSize(wire::kMaxMessageBytes);
  // One master per port: without this, gRPC's SO_REUSEPORT lets a second master bind the same
  // port and silently split the clients between the two.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  server->server_ = builder.BuildAndStart();
  if (!server->server_ || server->port_ == 0) {
    server->server_.reset();
    return Status(ErrorCode::RPC_FAIL,
                  "cannot listen on " + listen + " (port in use, or not an address of this host)");
  }
  if (o.meta_port >= 0 && o.tls_cert_pem.empty()) {
    server->meta_service_ = std::make_unique<MetaService>(*server, *server->service_);
    MetaServer::Options meta;
    meta.host = o.host;
    meta.port = o.meta_port;
    meta.handshake_timeout = o.handshake_timeout;
    meta.idle_timeout = o.idle_timeout;
    auto started = MetaServer::Start(meta, server->meta_service_.get());
    if (!started.ok()) {
      server->server_->Shutdown();
      server->server_.reset();
      return started.status();
    }
    server->meta_server_ = std::move(started).value();
  } else if (o.meta_port >= 0) {
    spdlog::info(
        "tierkv master: no metadata channel: it has no TLS yet, so with TLS configured every "
        "call goes over gRPC");
  }
  if (o.metrics != nullptr) {
    o.metrics->Add(server->rpc_latency_);
    MasterServer* s = server.get();
    server->auth_collector_ = std::make_shared<AuthCollector>("tierkv_master_", [s] {
      return AuthFigures{s->unauthenticated(), 0};
    });
    o.metrics->Add(server->auth_collector_);
  }
  return server;
}

MasterServer::~MasterServer() { Shutdown(); }

void MasterServer::BeginTerm(uint64_t epoch, std::shared_ptr<const TermLease> lease) {
  if (!options_.standby) return;
  EndTerm();
  auto term = NewTerm(epoch, std::move(lease));
  std::lock_guard lock(term_mu_);
  term_ = std::move(term);
  leader_hint_ = address();
  leader_hint_epoch_ = epoch;
}

void MasterServer::EndTerm() {
  if (!options_.standby) return;
  std::shared_ptr<Term> ended;
  {
    std::lock_guard lock(term_mu_);
    ended = std::move(term_);
    term_ = nullptr;
  }
  if (!ended) return;
  if (options_.metrics != nullptr && ended->collector) {
    options_.metrics->Remove(ended->collector.get());
  }
  if (service_) service_->CancelStreams(ended.get(), /*closing=*/false);
  ended->maintenance.reset();
  ended->reaper.reset();
  // The state goes with the last call still holding the term.
}

void MasterServer::SetLeader(const std::string& address, uint64_t epoch) {
  std::lock_guard lock(term_mu_);
  leader_hint_ = address;
  leader_hint_epoch_ = epoch;
}

void MasterServer::LeaderHint(std::string* address, uint64_t* epoch) const {
  std::lock_guard lock(term_mu_);
  *address = leader_hint_;
  *epoch = leader_hint_epoch_;
}

std::shared_ptr<MasterServer::Term> MasterServer::CurrentTerm() const {
  std::lock_guard lock(term_mu_);
  return term_;
}

bool MasterServer::leading() const {
  auto term = CurrentTerm();
  return term != nullptr && term->Valid();
}

uint64_t MasterServer::epoch() const {
  auto term = CurrentTerm();
  return term ? term->epoch : 0;
}

MasterService& MasterServer::master() { return CurrentTerm()->master; }

std::vector<std::string> MasterServer::SegmentNames() const {
  std::vector<std::string> names;
  if (std::shared_ptr<Term> term = CurrentTerm()) {
    for (const SegmentUsage& u : term->master.segments().Usage()) {
      names.push_back(u.name.substr(0, u.name.find('@')));
    }
  }
  return names;
}
ClientRegistry& MasterServer::clients() { return CurrentTerm()->clients; }
MasterRpcHandler& MasterServer::handler() { return CurrentTerm()->handler; }

void MasterServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    std::shared_ptr<Term> term;
    {
      std::lock_guard lock(term_mu_);
      term = std::move(term_);
      term_ = nullptr;
    }
    // First: once Remove returns, no scrape reads the master or the histograms any more.
    if (options_.metrics != nullptr) {
      if (term && term->collector) options_.metrics->Remove(term->collector.get());
      if (rpc_latency_) options_.metrics->Remove(rpc_latency_.get());
      if (auth_collector_) options_.metrics->Remove(auth_collector_.get());
    }
    if (service_) service_->CancelStreams(nullptr, /*closing=*/true);
    if (meta_server_) meta_server_->Shutdown();
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
    if (term) {
      term->maintenance.reset();
      term->reaper.reset();
    }
    if (server_) server_->Wait();
  });
}

std::string MasterServer::address() const {
  const bool v6 = options_.host.find(':') != std::string::npos && options_.host.front() != '[';
  return (v6 ? "[" + options_.host + "]" : options_.host) + ":" + std::to_string(port_);
}

}  // namespace tierkv
