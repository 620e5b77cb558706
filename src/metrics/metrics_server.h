// MetricsServer: serves a MetricsRegistry over HTTP for Prometheus.
//
//   GET /metrics   the registry in the Prometheus text format (0.0.4; gzip if asked)
//   GET /health    200 with the body "ok\n" while the process serves (a liveness probe)
//   GET <page>     text/plain from options.text_pages (the master's /get_all_segments)
//
// HTTP is libmicrohttpd's (Debian's libmicrohttpd-dev), on one event-loop thread (epoll) that
// never blocks on a client: idle or half-sent connections cost a file descriptor each, not a
// thread, so /health answers at once while many slow clients hold connections open (a
// thread-per-connection server is starved by as many idle clients as it has threads). A
// connection that completes no request within kConnectionTimeoutSeconds is closed; at most
// kMaxConnections are open at once (more are refused until one closes). /metrics is
// collected on a worker thread (a scrape walks the master's tables) while its connection is
// suspended, so a slow scrape does not hold up /health either. Other paths: 404; a method
// other than GET or HEAD: 405.
//
// The listening socket is bound by Start itself, to exactly `host`:`port` (one address: the
// first the host resolves to, IPv4 or IPv6), so the error names the address and the errno.
//
// Thread-safety: thread-safe. Owns the listening socket, the event-loop and worker threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "metrics/metrics_registry.h"
#include "tierkv/status.h"

namespace tierkv {

struct MetricsServerOptions {
  std::string host = "127.0.0.1";  // an IPv4/IPv6 address or a host name
  int port = 9003;                 // 0 = a free port, chosen by the kernel
  size_t threads = 1;              // /metrics collection threads (at least 1)
  // More GET paths ("/get_all_segments"), each answered 200 with the text its function returns,
  // computed on a collection thread as /metrics is. The functions must be thread-safe.
  std::map<std::string, std::function<std::string()>> text_pages;
};

class MetricsServer {
 public:
  // A connection that has not completed a request within this long is closed.
  static constexpr unsigned kConnectionTimeoutSeconds = 10;
  // Connections open at once; further ones are refused (closed on accept).
  static constexpr unsigned kMaxConnections = 1024;

  // Binds and starts serving `registry`. INVALID_PARAMS for a bad port, host or thread count;
  // RPC_FAIL naming the address and the reason if it cannot listen (e.g. "Address already in
  // use", a host that does not resolve).
  static Result<std::unique_ptr<MetricsServer>> Start(const MetricsServerOptions& options,
                                                      std::shared_ptr<MetricsRegistry> registry);
  // Stops listening, answers the scrapes queued (or 503), closes every connection, joins.
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }  // host:port

  struct Impl;

 private:
  MetricsServer() = default;

  std::string host_;  // as given (an IPv6 address in brackets)
  int port_ = 0;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tierkv
