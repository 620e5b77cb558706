#include "rpc/meta_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/byte_io.h"
#include "common/errno_text.h"
#include "rpc/meta_io.h"
#include "transport/socket_address.h"

namespace tierkv {
namespace {

MetaDeadline In(Millis timeout) { return std::chrono::steady_clock::now() + timeout; }

}  // namespace

Result<std::unique_ptr<MetaServer>> MetaServer::Start(Options options, Handler* handler) {
  const std::string wanted = transport::FormatHostPort(options.host, options.port);
  if (options.handshake_timeout.count() <= 0 || options.idle_timeout.count() <= 0) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "metadata channel: handshake and idle timeouts must be > 0 ms");
  }
  auto at =
      transport::ResolveHost(options.host, options.port, /*passive=*/true, ErrorCode::RPC_FAIL);
  if (!at.ok()) return at.status();
  std::unique_ptr<MetaServer> server(new MetaServer(std::move(options), handler));
  server->listener_ = UniqueFd(::socket(at->storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!server->listener_.valid()) {
    return Status(ErrorCode::RPC_FAIL, "metadata channel: socket: " + ErrnoText(errno));
  }
  const int one = 1;
  setsockopt(server->listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (at->storage.ss_family == AF_INET6) {
    setsockopt(server->listener_.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  }
  if (::bind(server->listener_.get(), at->get(), at->length) != 0 ||
      ::listen(server->listener_.get(), SOMAXCONN) != 0) {
    return Status(ErrorCode::RPC_FAIL,
                  "metadata channel: cannot listen on " + wanted + ": " + ErrnoText(errno));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (getsockname(server->listener_.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    return Status(ErrorCode::RPC_FAIL, "metadata channel: getsockname: " + ErrnoText(errno));
  }
  server->port_ = transport::PortOf(bound);
  server->acceptor_ = std::thread([s = server.get()] { s->AcceptLoop(); });
  return server;
}

MetaServer::~MetaServer() { Shutdown(); }

void MetaServer::Shutdown() {
  std::call_once(shutdown_once_, [this] {
    stopping_.store(true);
    // Wakes the blocking accept (it fails with EINVAL from now on).
    if (listener_.valid()) ::shutdown(listener_.get(), SHUT_RDWR);
    if (acceptor_.joinable()) acceptor_.join();
    std::list<std::unique_ptr<Connection>> connections;
    {
      std::lock_guard lock(mu_);
      for (auto& c : connections_) {
        if (c->fd.valid()) ::shutdown(c->fd.get(), SHUT_RDWR);
      }
      connections.swap(connections_);
    }
    for (auto& c : connections) {
      if (c->thread.joinable()) c->thread.join();
    }
    listener_.Reset();
  });
}

void MetaServer::ReapLocked() {
  for (auto it = connections_.begin(); it != connections_.end();) {
    if ((*it)->done.load()) {
      (*it)->thread.join();
      it = connections_.erase(it);
    } else {
      ++it;
    }
  }
}

void MetaServer::AcceptLoop() {
  int64_t last_full_log_s = 0;
  while (!stopping_.load()) {
    sockaddr_storage peer{};
    socklen_t length = sizeof(peer);
    const int fd = ::accept4(listener_.get(), reinterpret_cast<sockaddr*>(&peer), &length,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      spdlog::warn("metadata channel: accept: {}", ErrnoText(errno));
      // Out of descriptors, most likely: rest rather than spin.
      std::this_thread::sleep_for(Millis(100));
      continue;
    }
    auto connection = std::make_unique<Connection>();
    connection->fd = UniqueFd(fd);
    connection->peer = transport::DescribeAddress(peer);
    std::lock_guard lock(mu_);
    ReapLocked();
    if (connections_.size() >= options_.max_connections) {
      const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count();
      if (now != last_full_log_s) {
        last_full_log_s = now;
        spdlog::warn("metadata channel: {} connections open (the limit): closed one from {}",
                     connections_.size(), connection->peer);
      }
      continue;  // the connection closes as it goes out of scope
    }
    Connection* c = connection.get();
    connections_.push_back(std::move(connection));
    c->thread = std::thread([this, c] {
      Serve(c);
      std::lock_guard done_lock(mu_);  // Shutdown() shuts descriptors down under mu_
      c->fd.Reset();                   // closed now, not when the next accept reaps it
      c->done.store(true);
    });
  }
}

void MetaServer::Serve(Connection* c) {
  const int fd = c->fd.get();
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::string why;
  auto ended = [&](const char* when, MetaIo io) {
    if (!stopping_.load() && io != MetaIo::kClosed) {
      spdlog::debug("metadata channel: closed the connection from {} {}: {}", c->peer, when,
                    MetaIoText(io, why));
    }
  };
  // The handshake: challenge, hello, welcome.
  const MetaDeadline handshake = In(options_.handshake_timeout);
  MetaChallenge challenge;
  challenge.token_required = handler_->token_required();
  challenge.idle_timeout_ms = static_cast<uint32_t>(options_.idle_timeout.count());
  challenge.nonce = RandomNonce();
  if (MetaIo io = SendAll(fd, {View(EncodeMetaChallenge(challenge))}, handshake, &why);
      io != MetaIo::kOk) {
    return ended("during its handshake", io);
  }
  MetaHelloBytes hello_bytes;
  if (MetaIo io = RecvAll(fd, hello_bytes.data(), hello_bytes.size(), handshake, &why);
      io != MetaIo::kOk) {
    return ended("during its handshake", io);
  }
  Result<TokenDigest> proof = DecodeMetaHello(hello_bytes);
  if (!proof.ok()) {
    spdlog::warn("metadata channel: refused a connection from {}: {}", c->peer,
                 proof.status().message());
    return;
  }
  std::string secret;
  MetaWelcome welcome;
  if (challenge.token_required) {
    secret = handler_->MatchMac(*proof, {kMetaHelloLabel, View(challenge.nonce)});
    if (secret.empty()) {
      handler_->Refused(c->peer);
      welcome.status = ToInt(ErrorCode::UNAUTHENTICATED);
      (void)SendAll(fd, {View(EncodeMetaWelcome(welcome))}, handshake, &why);
      return;
    }
    welcome.proof = TokenMac(secret, {kMetaServerLabel, View(challenge.nonce), View(*proof)});
  }
  if (MetaIo io = SendAll(fd, {View(EncodeMetaWelcome(welcome))}, handshake, &why);
      io != MetaIo::kOk) {
    return ended("during its handshake", io);
  }
  // Calls, one at a time.
  std::string request;
  std::string answer;
  while (!stopping_.load()) {
    if (MetaIo io = AwaitReadable(fd, In(options_.idle_timeout), &why); io != MetaIo::kOk) {
      return ended("idle", io);
    }
    const MetaDeadline frame = In(options_.handshake_timeout);
    MetaCallHeaderBytes header_bytes;
    if (MetaIo io = RecvAll(fd, header_bytes.data(), header_bytes.size(), frame, &why);
        io != MetaIo::kOk) {
      return ended("between calls", io);
    }
    Result<MetaCallHeader> header = DecodeMetaCallHeader(header_bytes);
    if (!header.ok()) {
      // The framing is lost: say why, then close.
      const std::string& message = header.status().message();
      MetaAnswerHeader refusal{static_cast<uint32_t>(message.size()),
                               LoadAt<uint16_t>(header_bytes.data(), 4),
                               ToInt(ErrorCode::INVALID_PARAMS)};
      (void)SendAll(fd, {View(EncodeMetaAnswerHeader(refusal)), message}, frame, &why);
      spdlog::warn("metadata channel: closed the connection from {}: {}", c->peer, message);
      return;
    }
    request.resize(header->length);
    if (MetaIo io = RecvAll(fd, request.data(), request.size(), frame, &why); io != MetaIo::kOk) {
      return ended("in a call", io);
    }
    answer.clear();
    int32_t status = handler_->Serve(secret, c->peer, header->method, request, &answer);
    if (answer.size() > kMetaMaxMessageBytes) {
      answer = "the answer of " + std::to_string(answer.size()) + " bytes is over the limit of " +
               std::to_string(kMetaMaxMessageBytes) + " (a smaller batch fits)";
      status = ToInt(ErrorCode::RPC_FAIL);
    }
    calls_.fetch_add(1, std::memory_order_relaxed);
    const MetaAnswerHeader reply{static_cast<uint32_t>(answer.size()),
                                 static_cast<uint16_t>(header->method), status};
    if (MetaIo io = SendAll(fd, {View(EncodeMetaAnswerHeader(reply)), answer},
                            In(options_.handshake_timeout), &why);
        io != MetaIo::kOk) {
      return ended("answering", io);
    }
  }
}

}  // namespace tierkv
