// MetricsServer: serves a MetricsRegistry over HTTP for Prometheus.
//
//   GET /metrics   the registry in the Prometheus text format (0.0.4; gzip if asked)
//   GET /health    200 with the body "ok\n" while the process serves (a liveness probe)
//
// prometheus-cpp's Exposer (CivetWeb) serves /metrics. Exposer has no public way to add a
// handler for another URI, but it passes CivetWeb callbacks through: /health is answered by
// CivetWeb's begin_request callback, before CivetWeb looks for a handler. Other paths: 404.
//
// Thread-safety: thread-safe. Requests are served on CivetWeb's threads (`threads` of them).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "metrics/metrics_registry.h"
#include "tierkv/status.h"

namespace prometheus {
class Exposer;
}  // namespace prometheus

namespace tierkv {

struct MetricsServerOptions {
  std::string host = "127.0.0.1";  // an IPv4 address or a host name (CivetWeb has no IPv6 here)
  int port = 9003;                 // 0 = a free port, chosen by the kernel
  size_t threads = 2;              // CivetWeb worker threads
};

class MetricsServer {
 public:
  // Binds and starts serving `registry`. INVALID_PARAMS for a bad port or host; RPC_FAIL
  // naming the address and CivetWeb's reason if it cannot listen (e.g. "Address already in
  // use").
  static Result<std::unique_ptr<MetricsServer>> Start(const MetricsServerOptions& options,
                                                      std::shared_ptr<MetricsRegistry> registry);
  // Stops listening and waits for the requests in flight (milliseconds: see Stop in the .cc).
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }  // host:port

 private:
  MetricsServer() = default;

  std::string host_;
  int port_ = 0;
  // An IPv4 address that reaches the listening socket (0.0.0.0 -> 127.0.0.1), for the
  // destructor; 0 = unknown (then stopping may take CivetWeb's 2 s poll quantum).
  uint32_t wake_address_ = 0;  // network byte order
  std::shared_ptr<MetricsRegistry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace tierkv
