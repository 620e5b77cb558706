#include "metrics/metrics_server.h"

#include <fcntl.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <prometheus/text_serializer.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "common/errno_text.h"

namespace tierkv {
namespace {

constexpr std::string_view kHealthBody = "ok\n";
constexpr const char* kTextType = "text/plain; charset=utf-8";
constexpr const char* kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
// Scrapes waiting for a worker; more get 503 (Prometheus scrapes one at a time).
constexpr size_t kMaxQueuedScrapes = 64;
// Per-connection memory for headers; a request whose headers do not fit is refused (431).
constexpr size_t kConnectionMemory = 32 * 1024;

// One request, from MHD's first call of the handler until its completion callback.
struct Request {
  bool metrics = false;  // /metrics, or one of the text pages (`page`)
  const std::function<std::string()>* page = nullptr;
  bool gzip = false;
  bool ready = false;  // the worker set body (guarded by Impl::mu)
  std::string body;
};

bool AcceptsGzip(MHD_Connection* connection) {
  const char* accept =
      MHD_lookup_connection_value(connection, MHD_HEADER_KIND, MHD_HTTP_HEADER_ACCEPT_ENCODING);
  if (accept == nullptr) return false;
  // A token "gzip" in the comma-separated list (quality values are not weighed: q=0 is rare).
  std::string_view list(accept);
  while (!list.empty()) {
    const size_t comma = list.find(',');
    std::string_view token = list.substr(0, comma);
    while (!token.empty() && (token.front() == ' ' || token.front() == '\t'))
      token.remove_prefix(1);
    token = token.substr(0, token.find(';'));
    while (!token.empty() && (token.back() == ' ' || token.back() == '\t')) token.remove_suffix(1);
    if (token == "gzip") return true;
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
  return false;
}

// gzip of `text`; empty on failure (the caller sends it uncompressed then).
std::string Gzip(const std::string& text) {
  z_stream stream{};
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
    return {};
  }
  std::string out(deflateBound(&stream, text.size()), '\0');
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  stream.avail_in = static_cast<uInt>(text.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  return rc == Z_STREAM_END ? out : std::string();
}

MHD_Result Respond(MHD_Connection* connection, unsigned status, const std::string& body,
                   const char* type, bool gzip = false) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (gzip) MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

void LogFromMhd(void* /*cls*/, const char* format, va_list args) {
  char text[512];
  std::vsnprintf(text, sizeof(text), format, args);
  std::string_view line(text);
  while (!line.empty() && line.back() == '\n') line.remove_suffix(1);
  // Clients that time out or hang up are the normal case under a slow-client storm: debug.
  spdlog::debug("metrics HTTP server: {}", line);
}

}  // namespace

struct MetricsServer::Impl {
  std::shared_ptr<MetricsRegistry> registry;
  std::map<std::string, std::function<std::string()>> text_pages;  // immutable once started
  MHD_Daemon* daemon = nullptr;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<MHD_Connection*, Request*>> queue;  // guarded by mu
  bool stopping = false;                                   // guarded by mu
  std::vector<std::thread> workers;

  static MHD_Result Handle(void* cls, MHD_Connection* connection, const char* url,
                           const char* method, const char* /*version*/, const char* /*upload*/,
                           size_t* upload_size, void** req_cls);
  static void Completed(void* /*cls*/, MHD_Connection* /*connection*/, void** req_cls,
                        MHD_RequestTerminationCode /*code*/) {
    delete static_cast<Request*>(*req_cls);
    *req_cls = nullptr;
  }

  void Work() {
    std::unique_lock<std::mutex> lock(mu);
    while (true) {
      cv.wait(lock, [this] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // stopping, and every queued scrape answered
      auto [connection, request] = queue.front();
      queue.pop_front();
      lock.unlock();
      std::string body;
      try {
        body = request->page != nullptr
                   ? (*request->page)()
                   : prometheus::TextSerializer().Serialize(registry->Collect());
      } catch (const std::exception& e) {
        spdlog::warn("metrics HTTP server: collecting metrics failed: {}", e.what());
      }
      if (request->gzip) {
        std::string zipped = Gzip(body);
        if (zipped.empty()) {
          request->gzip = false;
        } else {
          body = std::move(zipped);
        }
      }
      lock.lock();
      request->body = std::move(body);
      request->ready = true;
      MHD_resume_connection(connection);  // the handler is called again: it sends the body
    }
  }

  void Stop() {
    // No new connections; once quiesced, the listening socket is ours to close.
    const MHD_socket listen_fd =
        daemon != nullptr ? MHD_quiesce_daemon(daemon) : MHD_INVALID_SOCKET;
    {
      std::lock_guard<std::mutex> lock(mu);
      stopping = true;
    }
    cv.notify_all();
    for (std::thread& t : workers) {
      if (t.joinable()) t.join();  // each answered what was queued (resumed its connection)
    }
    if (daemon != nullptr) MHD_stop_daemon(daemon);
    daemon = nullptr;
    if (listen_fd != MHD_INVALID_SOCKET) close(listen_fd);
  }
};

MHD_Result MetricsServer::Impl::Handle(void* cls, MHD_Connection* connection, const char* url,
                                       const char* method, const char* /*version*/,
                                       const char* /*upload*/, size_t* upload_size,
                                       void** req_cls) {
  auto* self = static_cast<Impl*>(cls);
  auto* request = static_cast<Request*>(*req_cls);
  if (request == nullptr) {
    request = new Request();
    *req_cls = request;  // freed by Completed
    request->metrics = std::strcmp(url, "/metrics") == 0;
    if (auto page = self->text_pages.find(url); page != self->text_pages.end()) {
      request->metrics = true;  // answered like /metrics, from a collection thread
      request->page = &page->second;
    }
  }
  if (*upload_size != 0) {
    *upload_size = 0;  // a body is read and ignored; the answer comes once it is in
    return MHD_YES;
  }
  if (request->metrics) {
    // Called again after the worker resumed the connection: its body is ready.
    std::unique_lock<std::mutex> lock(self->mu);
    if (request->ready) {
      std::string body = std::move(request->body);
      const bool gzip = request->gzip;
      lock.unlock();
      return Respond(connection, MHD_HTTP_OK, body,
                     request->page != nullptr ? kTextType : kMetricsType, gzip);
    }
  }
  const bool get_or_head = std::strcmp(method, MHD_HTTP_METHOD_GET) == 0 ||
                           std::strcmp(method, MHD_HTTP_METHOD_HEAD) == 0;
  const bool health = std::strcmp(url, "/health") == 0;
  if (!health && !request->metrics) return Respond(connection, 404, "not found\n", kTextType);
  if (!get_or_head) {
    return Respond(connection, MHD_HTTP_METHOD_NOT_ALLOWED,
                   std::string(url) + " answers GET and HEAD only\n", kTextType);
  }
  if (health) return Respond(connection, MHD_HTTP_OK, std::string(kHealthBody), kTextType);
  request->gzip = AcceptsGzip(connection);
  {
    std::lock_guard<std::mutex> lock(self->mu);
    if (!self->stopping && self->queue.size() < kMaxQueuedScrapes) {
      self->queue.emplace_back(connection, request);
      MHD_suspend_connection(connection);  // resumed by the worker once the body is ready
      self->cv.notify_one();
      return MHD_YES;
    }
  }
  return Respond(connection, MHD_HTTP_SERVICE_UNAVAILABLE, "too many scrapes at once\n", kTextType);
}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const MetricsServerOptions& options, std::shared_ptr<MetricsRegistry> registry) {
  auto bad = [](std::string m) { return Status(ErrorCode::INVALID_PARAMS, std::move(m)); };
  if (registry == nullptr) return bad("no metrics registry");
  if (options.host.empty()) return bad("metrics host is empty");
  if (options.port < 0 || options.port > 65535) {
    return bad("metrics port " + std::to_string(options.port) + " is not in 0..65535");
  }
  if (options.threads == 0) return bad("metrics server needs at least one thread");

  std::string host = options.host;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  const bool v6_literal = host.find(':') != std::string::npos;
  const std::string shown = v6_literal ? "[" + host + "]" : host;
  const std::string listen = shown + ":" + std::to_string(options.port);
  auto fail = [&](const std::string& why) {
    return Status(ErrorCode::RPC_FAIL, "cannot serve metrics on " + listen + " (port " +
                                           std::to_string(options.port) + "): " + why);
  };

  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(options.port);
  if (const int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return fail("cannot resolve \"" + host + "\": " + gai_strerror(rc));
  }
  sockaddr_storage address{};
  socklen_t length = 0;
  for (addrinfo* it = found; it != nullptr; it = it->ai_next) {
    if ((it->ai_family == AF_INET || it->ai_family == AF_INET6) &&
        it->ai_addrlen <= sizeof(address)) {
      std::memcpy(&address, it->ai_addr, it->ai_addrlen);
      length = it->ai_addrlen;
      break;
    }
  }
  freeaddrinfo(found);
  if (length == 0) return fail("\"" + host + "\" has no IPv4 or IPv6 address");

  const int fd = socket(address.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return fail("socket: " + ErrnoText(errno));
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (address.ss_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0 ||
      ::listen(fd, 128) != 0) {
    const int err = errno;
    close(fd);
    return fail("cannot bind to " + listen + ": " + std::to_string(err) + " (" + ErrnoText(err) +
                ")");
  }
  sockaddr_storage bound{};
  socklen_t bound_length = sizeof(bound);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_length) != 0) {
    const int err = errno;
    close(fd);
    return fail("getsockname: " + ErrnoText(err));
  }
  const int port = bound.ss_family == AF_INET6
                       ? ntohs(reinterpret_cast<const sockaddr_in6&>(bound).sin6_port)
                       : ntohs(reinterpret_cast<const sockaddr_in&>(bound).sin_port);

  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->host_ = shown;
  server->port_ = port;
  server->impl_ = std::make_unique<Impl>();
  Impl* impl = server->impl_.get();
  impl->registry = std::move(registry);
  impl->text_pages = options.text_pages;
  unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  if (address.ss_family == AF_INET6) flags |= MHD_USE_IPv6;
  impl->daemon = MHD_start_daemon(
      flags, 0, nullptr, nullptr, &Impl::Handle, impl, MHD_OPTION_EXTERNAL_LOGGER, &LogFromMhd,
      nullptr, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
      kConnectionTimeoutSeconds, MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, kConnectionMemory, MHD_OPTION_NOTIFY_COMPLETED,
      &Impl::Completed, nullptr, MHD_OPTION_END);
  if (impl->daemon == nullptr) {
    close(fd);
    return fail("libmicrohttpd could not start (MHD_start_daemon)");
  }
  try {
    for (size_t i = 0; i < options.threads; ++i)
      impl->workers.emplace_back([impl] { impl->Work(); });
  } catch (const std::system_error& e) {
    impl->Stop();
    return fail(std::string("cannot start a thread: ") + e.what());
  }
  return server;
}

MetricsServer::~MetricsServer() {
  if (impl_ != nullptr) impl_->Stop();
}

}  // namespace tierkv
