#include "rpc/meta_client.h"

#include <google/protobuf/message_lite.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>

#include "common/errno_text.h"
#include "rpc/meta_io.h"
#include "transport/socket_address.h"

namespace tierkv {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

constexpr char kClosed[] = "closed (moved to another master)";

grpc::StatusCode CodeOfIo(MetaIo io) {
  return io == MetaIo::kTimeout ? grpc::StatusCode::DEADLINE_EXCEEDED
                                : grpc::StatusCode::UNAVAILABLE;
}

// What an answer's refusal becomes.
grpc::StatusCode CodeOfRefusal(int32_t status) {
  switch (static_cast<ErrorCode>(status)) {
    case ErrorCode::UNAUTHENTICATED:
      return grpc::StatusCode::UNAUTHENTICATED;
    case ErrorCode::INVALID_PARAMS:
      return grpc::StatusCode::INVALID_ARGUMENT;
    default:
      return grpc::StatusCode::INTERNAL;
  }
}

}  // namespace

MetaChannel::MetaChannel(std::string address, std::shared_ptr<const TokenSet> tokens)
    : address_(std::move(address)), tokens_(std::move(tokens)) {}

MetaChannel::~MetaChannel() { Close(); }

void MetaChannel::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  idle_.clear();
  for (int fd : busy_) ::shutdown(fd, SHUT_RDWR);
}

grpc::Status MetaChannel::Failure(grpc::StatusCode code, const std::string& what) const {
  return grpc::Status(code, "metadata channel to " + address_ + ": " + what);
}

grpc::Status MetaChannel::Take(SteadyTime deadline, std::unique_ptr<Connection>* out) {
  const SteadyTime now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mu_);
    if (closed_) {
      return Failure(grpc::StatusCode::CANCELLED, kClosed);
    }
    while (!idle_.empty()) {
      std::unique_ptr<Connection> c = std::move(idle_.back());
      idle_.pop_back();
      // Readable while idle: the master closed it (or broke the protocol). Idle too long: the
      // master may close it while the call is on its way.
      pollfd p{c->fd.get(), POLLIN, 0};
      if (now - c->idle_since >= c->keep || ::poll(&p, 1, 0) != 0) continue;
      busy_.insert(c->fd.get());
      *out = std::move(c);
      return grpc::Status::OK;
    }
  }
  grpc::Status dialled = Dial(deadline, out);
  if (!dialled.ok()) return dialled;
  std::lock_guard lock(mu_);
  if (closed_) {
    out->reset();
    return Failure(grpc::StatusCode::CANCELLED, kClosed);
  }
  busy_.insert((*out)->fd.get());
  return grpc::Status::OK;
}

void MetaChannel::Give(std::unique_ptr<Connection> c) {
  c->idle_since = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  busy_.erase(c->fd.get());
  if (!closed_) idle_.push_back(std::move(c));
}

void MetaChannel::Drop(std::unique_ptr<Connection> c) {
  std::lock_guard lock(mu_);
  busy_.erase(c->fd.get());
  c.reset();  // closed under the lock: Close() never shuts down a reused descriptor
}

grpc::Status MetaChannel::Dial(SteadyTime deadline, std::unique_ptr<Connection>* out) {
  Result<transport::HostPort> host_port = transport::ParseHostPort(address_, false);
  if (!host_port.ok())
    return Failure(grpc::StatusCode::INVALID_ARGUMENT, host_port.status().message());
  auto remote = transport::ResolveHost(host_port->host, host_port->port, /*passive=*/false,
                                       ErrorCode::RPC_FAIL);
  if (!remote.ok()) return Failure(grpc::StatusCode::UNAVAILABLE, remote.status().message());
  auto c = std::make_unique<Connection>();
  c->fd =
      UniqueFd(::socket(remote->storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!c->fd.valid()) return Failure(grpc::StatusCode::INTERNAL, "socket: " + ErrnoText(errno));
  const int fd = c->fd.get();
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  std::string why;
  if (::connect(fd, remote->get(), remote->length) != 0) {
    if (errno != EINPROGRESS) {
      return Failure(grpc::StatusCode::UNAVAILABLE, "connect: " + ErrnoText(errno));
    }
    pollfd p{fd, POLLOUT, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    int rc;
    do {
      rc = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) return Failure(grpc::StatusCode::DEADLINE_EXCEEDED, "connect timed out");
    int err = 0;
    socklen_t len = sizeof(err);
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Failure(grpc::StatusCode::UNAVAILABLE, "connect: " + ErrnoText(err));
  }
  MetaChallengeBytes challenge_bytes;
  if (MetaIo io = RecvAll(fd, challenge_bytes.data(), challenge_bytes.size(), deadline, &why);
      io != MetaIo::kOk) {
    return Failure(CodeOfIo(io), "reading the master's challenge: " + MetaIoText(io, why));
  }
  Result<MetaChallenge> challenge = DecodeMetaChallenge(challenge_bytes);
  if (!challenge.ok()) return Failure(grpc::StatusCode::UNAVAILABLE, challenge.status().message());
  const std::string secret = tokens_ ? tokens_->own() : std::string();
  if (challenge->token_required && secret.empty()) {
    return Failure(grpc::StatusCode::UNAUTHENTICATED,
                   "the master requires the cluster token and this process has none (config key "
                   "cluster_token_file, or --token-file)");
  }
  const TokenDigest proof =
      secret.empty() ? TokenDigest{} : TokenMac(secret, {kMetaHelloLabel, View(challenge->nonce)});
  if (MetaIo io = SendAll(fd, {View(EncodeMetaHello(proof))}, deadline, &why); io != MetaIo::kOk) {
    return Failure(CodeOfIo(io), "sending the hello: " + MetaIoText(io, why));
  }
  MetaWelcomeBytes welcome_bytes;
  if (MetaIo io = RecvAll(fd, welcome_bytes.data(), welcome_bytes.size(), deadline, &why);
      io != MetaIo::kOk) {
    return Failure(CodeOfIo(io), "reading the welcome: " + MetaIoText(io, why));
  }
  Result<MetaWelcome> welcome = DecodeMetaWelcome(welcome_bytes);
  if (!welcome.ok()) return Failure(grpc::StatusCode::UNAVAILABLE, welcome.status().message());
  if (welcome->status == ToInt(ErrorCode::UNAUTHENTICATED)) {
    return Failure(grpc::StatusCode::UNAUTHENTICATED,
                   "the master refused this process's cluster token (another cluster's, or a "
                   "token it no longer accepts)");
  }
  if (welcome->status != 0) {
    return Failure(grpc::StatusCode::UNAVAILABLE, "the master refused the connection with status " +
                                                      std::to_string(welcome->status));
  }
  // Mutual: a listener that does not hold the token must not receive this process's calls.
  if (!secret.empty() &&
      !DigestsEqual(welcome->proof,
                    TokenMac(secret, {kMetaServerLabel, View(challenge->nonce), View(proof)}))) {
    return Failure(grpc::StatusCode::UNAUTHENTICATED,
                   "the listener did not prove the cluster token: not this cluster's master");
  }
  c->keep = std::chrono::milliseconds(challenge->idle_timeout_ms / 2);
  *out = std::move(c);
  return grpc::Status::OK;
}

grpc::Status MetaChannel::Call(MetaMethod method, const google::protobuf::MessageLite& request,
                               google::protobuf::MessageLite* response,
                               std::chrono::system_clock::time_point deadline) {
  // The caller's deadline is on the system clock (gRPC's); waits here use the steady clock.
  const SteadyTime steady_deadline =
      std::chrono::steady_clock::now() +
      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
          deadline - std::chrono::system_clock::now());
  std::string body;
  if (!request.SerializeToString(&body) || body.size() > kMetaMaxMessageBytes) {
    return Failure(grpc::StatusCode::INVALID_ARGUMENT,
                   std::string(MetaMethodName(method)) + ": the request of " +
                       std::to_string(body.size()) + " bytes cannot be sent (limit " +
                       std::to_string(kMetaMaxMessageBytes) + ")");
  }
  std::unique_ptr<Connection> c;
  if (grpc::Status taken = Take(steady_deadline, &c); !taken.ok()) return taken;
  const int fd = c->fd.get();
  std::string why;
  const MetaCallHeader header{static_cast<uint32_t>(body.size()), method};
  if (MetaIo io = SendAll(fd, {View(EncodeMetaCallHeader(header)), body}, steady_deadline, &why);
      io != MetaIo::kOk) {
    Drop(std::move(c));
    return Failure(CodeOfIo(io), std::string(MetaMethodName(method)) +
                                     ": sending the call: " + MetaIoText(io, why));
  }
  MetaAnswerHeaderBytes answer_bytes;
  if (MetaIo io = RecvAll(fd, answer_bytes.data(), answer_bytes.size(), steady_deadline, &why);
      io != MetaIo::kOk) {
    Drop(std::move(c));
    return Failure(CodeOfIo(io), std::string(MetaMethodName(method)) +
                                     ": waiting for the answer: " + MetaIoText(io, why));
  }
  Result<MetaAnswerHeader> answer = DecodeMetaAnswerHeader(answer_bytes);
  if (!answer.ok() || answer->method != static_cast<uint16_t>(method)) {
    Drop(std::move(c));
    return Failure(grpc::StatusCode::INTERNAL,
                   std::string(MetaMethodName(method)) + ": a malformed answer: " +
                       (answer.ok() ? "it answers method " + std::to_string(answer->method)
                                    : answer.status().message()));
  }
  body.resize(answer->length);
  if (MetaIo io = RecvAll(fd, body.data(), body.size(), steady_deadline, &why); io != MetaIo::kOk) {
    Drop(std::move(c));
    return Failure(CodeOfIo(io), std::string(MetaMethodName(method)) +
                                     ": reading the answer: " + MetaIoText(io, why));
  }
  calls_.fetch_add(1, std::memory_order_relaxed);
  if (answer->status != 0) {
    Give(std::move(c));
    return Failure(CodeOfRefusal(answer->status),
                   std::string(MetaMethodName(method)) + " refused: " + body);
  }
  if (!response->ParseFromString(body)) {
    Drop(std::move(c));
    return Failure(grpc::StatusCode::INTERNAL, std::string(MetaMethodName(method)) +
                                                   ": a malformed answer of " +
                                                   std::to_string(body.size()) + " bytes");
  }
  Give(std::move(c));
  return grpc::Status::OK;
}

}  // namespace tierkv
