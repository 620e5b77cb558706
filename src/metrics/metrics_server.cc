#include "metrics/metrics_server.h"

#include <CivetServer.h>
#include <arpa/inet.h>
#include <civetweb.h>
#include <netdb.h>
#include <netinet/in.h>
#include <prometheus/exposer.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <exception>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace tierkv {
namespace {

constexpr std::string_view kHealthBody = "ok\n";

// CivetWeb reports why it could not start (e.g. "cannot bind to 127.0.0.1:9003: 98 (Address
// already in use)") through log_message, on the thread that starts it; Exposer's exception
// only says "possible problem binding to port". Start() points this at a string meanwhile.
thread_local std::string* start_errors = nullptr;

int LogMessage(const mg_connection* /*connection*/, const char* message) {
  if (start_errors != nullptr) {
    if (!start_errors->empty()) *start_errors += "; ";
    *start_errors += message;
  } else {
    spdlog::warn("metrics HTTP server: {}", message);
  }
  return 1;  // handled: CivetWeb prints nothing itself
}

// /health: answered here, before CivetWeb's handlers (see the header). 0 = not ours.
int BeginRequest(mg_connection* connection) {
  const mg_request_info* request = mg_get_request_info(connection);
  if (request == nullptr || request->local_uri == nullptr ||
      std::strcmp(request->local_uri, "/health") != 0) {
    return 0;
  }
  const bool get = std::strcmp(request->request_method, "GET") == 0;
  const bool head = std::strcmp(request->request_method, "HEAD") == 0;
  if (!get && !head) {
    mg_send_http_error(connection, 405, "%s", "/health answers GET and HEAD only\n");
    return 405;
  }
  mg_send_http_ok(connection, "text/plain; charset=utf-8",
                  static_cast<long long>(kHealthBody.size()));
  if (get) mg_write(connection, kHealthBody.data(), kHealthBody.size());
  return 200;
}

// The IPv4 address a client would use to reach a server listening on `host` (network byte
// order), or 0 if unknown.
uint32_t WakeAddressOf(const std::string& host) {
  in_addr address{};
  if (inet_pton(AF_INET, host.c_str(), &address) != 1) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) return 0;
    address = reinterpret_cast<const sockaddr_in*>(found->ai_addr)->sin_addr;
    freeaddrinfo(found);
  }
  if (address.s_addr == htonl(INADDR_ANY)) return htonl(INADDR_LOOPBACK);
  return address.s_addr;
}

// Opens and closes a TCP connection to address:port (best effort).
void Poke(uint32_t address, int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_addr.s_addr = address;
  peer.sin_port = htons(static_cast<uint16_t>(port));
  (void)connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof(peer));
  close(fd);
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const MetricsServerOptions& options, std::shared_ptr<MetricsRegistry> registry) {
  auto bad = [](std::string m) { return Status(ErrorCode::INVALID_PARAMS, std::move(m)); };
  if (registry == nullptr) return bad("no metrics registry");
  if (options.host.empty()) return bad("metrics host is empty");
  if (options.port < 0 || options.port > 65535) {
    return bad("metrics port " + std::to_string(options.port) + " is not in 0..65535");
  }
  if (options.threads == 0) return bad("metrics server needs at least one thread");

  const bool v6 = options.host.find(':') != std::string::npos;
  if (v6 && mg_check_feature(8) == 0) {
    return bad("metrics host " + options.host +
               " is an IPv6 address, and this CivetWeb is built without IPv6: serve metrics on "
               "an IPv4 address or a host name, or not at all");
  }
  const std::string host =
      v6 && options.host.front() != '[' ? "[" + options.host + "]" : options.host;
  const std::string listen = host + ":" + std::to_string(options.port);
  // The callbacks are copied by CivetWeb at start.
  CivetCallbacks callbacks;
  callbacks.begin_request = BeginRequest;
  callbacks.log_message = LogMessage;
  // A connection that sends no request holds a worker thread until request_timeout_ms
  // (CivetWeb's default: 30 s); scrapers send theirs at once.
  std::vector<std::string> civet_options = {"listening_ports",    listen,
                                            "num_threads",        std::to_string(options.threads),
                                            "request_timeout_ms", "10000"};

  std::unique_ptr<MetricsServer> server(new MetricsServer());
  std::string errors;
  start_errors = &errors;
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(std::move(civet_options), &callbacks);
  } catch (const std::exception& e) {
    start_errors = nullptr;
    if (errors.empty()) errors = e.what();
    return Status(ErrorCode::RPC_FAIL, "cannot serve metrics on " + listen + " (port " +
                                           std::to_string(options.port) + "): " + errors);
  }
  start_errors = nullptr;
  const std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    return Status(ErrorCode::RPC_FAIL, "metrics server on " + listen + " reports no port");
  }
  server->host_ = host;
  server->port_ = ports.front();
  if (!v6) server->wake_address_ = WakeAddressOf(options.host);
  server->registry_ = std::move(registry);
  server->exposer_->RegisterCollectable(server->registry_);
  return server;
}

MetricsServer::~MetricsServer() {
  if (exposer_ == nullptr) return;
  // CivetWeb's listening thread polls its sockets in 2 s quanta and looks at the stop flag only
  // between polls, so stopping it (Exposer's destructor) takes up to 2 s — every SIGTERM of
  // `tierkv master` would. Connecting to the port ends the poll at once: a helper thread does
  // that every 10 ms until the exposer is gone (the stop flag is set inside the destructor,
  // so one early connection is not enough). A connection that arrives as it stops is closed
  // unanswered.
  std::atomic<bool> stopped{false};
  std::thread waker;
  if (wake_address_ != 0) {
    waker = std::thread([this, &stopped] {
      while (!stopped.load()) {
        Poke(wake_address_, port_);
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    });
  }
  exposer_.reset();
  stopped.store(true);
  if (waker.joinable()) waker.join();
}

}  // namespace tierkv
