// The server side of the master's metadata channel (rpc/meta_protocol.h): a listening socket,
// and a thread per connection that checks the client's hello, then reads calls and answers each
// in turn. What a call does is the Handler's (MasterServer's: the same checks, fencing and
// handlers as its gRPC calls). A thread per connection because clients keep a few long-lived
// connections each and a call's latency is the point: the thread that reads a call answers it,
// with no hand-off. Limits: `max_connections` open at once (more are closed at accept, logged),
// a hello within `handshake_timeout`, a call at least every `idle_timeout` (else closed; the
// client is told the timeout in the challenge and drops idle connections first).
// Thread-safety: thread-safe; Shutdown() joins every thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

#include "common/clock.h"
#include "common/cluster_token.h"
#include "common/unique_fd.h"
#include "rpc/meta_protocol.h"
#include "tierkv/status.h"

namespace tierkv {

class MetaServer {
 public:
  class Handler {
   public:
    virtual ~Handler() = default;
    // Whether a client must prove the cluster token.
    virtual bool token_required() const = 0;
    // The accepted secret whose HMAC over `parts` is `proof`; "" = none.
    virtual std::string MatchMac(const TokenDigest& proof,
                                 std::initializer_list<std::string_view> parts) const = 0;
    // A connection was refused for its token (count it, log it).
    virtual void Refused(const std::string& peer) = 0;
    // One call from a connection admitted with `secret` ("" without tokens): 0 and the response
    // message's bytes in `answer`, or the ErrorCode that refuses the call and why in `answer`.
    virtual int32_t Serve(std::string_view secret, const std::string& peer, MetaMethod method,
                          std::string_view request, std::string* answer) = 0;
  };

  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;  // 0 = a free port, chosen by the kernel
    Millis handshake_timeout{10000};
    Millis idle_timeout{60000};
    size_t max_connections = 4096;
  };

  // Binds and starts accepting. `handler` must outlive the server. RPC_FAIL naming the address
  // when it cannot listen.
  static Result<std::unique_ptr<MetaServer>> Start(Options options, Handler* handler);
  ~MetaServer();
  MetaServer(const MetaServer&) = delete;
  MetaServer& operator=(const MetaServer&) = delete;

  // Stops accepting, closes every connection (a call being served finishes first) and joins the
  // threads. Idempotent.
  void Shutdown();

  int port() const { return port_; }
  uint64_t calls() const { return calls_.load(std::memory_order_relaxed); }

 private:
  struct Connection {
    UniqueFd fd;
    std::string peer;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  MetaServer(Options options, Handler* handler) : options_(std::move(options)), handler_(handler) {}
  void AcceptLoop();
  void Serve(Connection* connection);
  // Joins the threads of connections that ended. Requires mu_.
  void ReapLocked();

  const Options options_;
  Handler* const handler_;
  UniqueFd listener_;
  int port_ = 0;
  std::thread acceptor_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> calls_{0};
  std::mutex mu_;
  std::list<std::unique_ptr<Connection>> connections_;  // guarded by mu_
  std::once_flag shutdown_once_;
};

}  // namespace tierkv
