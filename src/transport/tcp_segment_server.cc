#include "transport/tcp_segment_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/errno_text.h"
#include "common/unique_fd.h"
#include "transport/stage_source.h"
#include "transport/tcp_protocol.h"
#include "transport/tcp_server_loop.h"
#include "transport/tls_stream.h"
#include "transport/ucx_worker.h"

namespace tierkv::transport {

size_t TcpSegmentServer::MaxConnections(uint64_t descriptor_limit) {
  const uint64_t reserve = std::max<uint64_t>(kReservedDescriptors, descriptor_limit / 4);
  const uint64_t budget = descriptor_limit > reserve ? descriptor_limit - reserve : 0;
  return static_cast<size_t>(std::clamp<uint64_t>(budget, 8, kMaxConnections));
}

Result<std::unique_ptr<TcpSegmentServer>> TcpSegmentServer::Start(
    std::shared_ptr<MemorySegment> segment, const std::string& host, int port,
    const UcxTransportOptions& options, std::shared_ptr<StageSource> stages) {
  using R = Result<std::unique_ptr<TcpSegmentServer>>;
  if (segment == nullptr) return R(ErrorCode::INVALID_PARAMS, "tcp segment server: no segment");
  if (host.empty()) return R(ErrorCode::INVALID_PARAMS, "tcp segment server: empty host");
  if (port < 0 || port > 65535) {
    return R(ErrorCode::INVALID_PARAMS,
             "tcp segment server: port " + std::to_string(port) + " outside 0..65535");
  }
  if (options.io_timeout.count() <= 0) {
    return R(ErrorCode::INVALID_CONFIG, "tcp segment server: io_timeout must be positive");
  }
  const std::string wanted = FormatHostPort(host, port);
  Result<SocketAddress> at = ResolveHost(host, port, true, ErrorCode::TRANSFER_FAIL);
  if (!at.ok()) return R(at.code(), "tcp segment server: " + at.status().message());

  auto loop = std::make_unique<Loop>();
  rlimit files{};
  loop->max_connections =
      getrlimit(RLIMIT_NOFILE, &files) == 0 ? MaxConnections(files.rlim_cur) : kMaxConnections;
  loop->segment = std::move(segment);
  loop->stages = std::move(stages);
  loop->options = options;
  loop->listener =
      UniqueFd(::socket(at->storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!loop->listener.valid()) {
    return R(ErrorCode::INTERNAL_ERROR, "tcp segment server: socket: " + ErrnoText(errno));
  }
  const int one = 1;
  setsockopt(loop->listener.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (at->storage.ss_family == AF_INET6) {
    setsockopt(loop->listener.get(), IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
  }
  if (::bind(loop->listener.get(), at->get(), at->length) != 0 ||
      ::listen(loop->listener.get(), SOMAXCONN) != 0) {
    return R(ErrorCode::TRANSFER_FAIL,
             "tcp segment server: cannot listen on " + wanted + ": " + ErrnoText(errno));
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  if (getsockname(loop->listener.get(), reinterpret_cast<sockaddr*>(&bound), &length) != 0) {
    return R(ErrorCode::INTERNAL_ERROR, "tcp segment server: getsockname: " + ErrnoText(errno));
  }
  loop->address = FormatHostPort(host, PortOf(bound));
  loop->epoll = UniqueFd(epoll_create1(EPOLL_CLOEXEC));
  loop->wake = UniqueFd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!loop->epoll.valid() || !loop->wake.valid()) {
    return R(ErrorCode::INTERNAL_ERROR, "tcp segment server: epoll/eventfd: " + ErrnoText(errno));
  }
  for (int fd : {loop->listener.get(), loop->wake.get()}) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (epoll_ctl(loop->epoll.get(), EPOLL_CTL_ADD, fd, &ev) != 0) {
      return R(ErrorCode::INTERNAL_ERROR, "tcp segment server: epoll_ctl: " + ErrnoText(errno));
    }
  }
  std::unique_ptr<TcpSegmentServer> server(new TcpSegmentServer());
  server->address_ = loop->address;
  loop->owner = server.get();
  server->loop_ = std::move(loop);
  Loop* raw = server->loop_.get();
  raw->inbox->wake_fd = raw->wake.get();
  try {
    server->thread_ = std::thread([raw] { raw->Run(); });
  } catch (const std::system_error& error) {
    return R(ErrorCode::INTERNAL_ERROR,
             std::string("tcp segment server: cannot start its thread: ") + error.what());
  }
  spdlog::info("tcp segment server: serving segment '{}' ({} bytes) on {}", raw->segment->name(),
               raw->segment->size(), server->address_);
  return server;
}

TcpSegmentServer::~TcpSegmentServer() { Stop(); }

void TcpSegmentServer::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  if (loop_ != nullptr) {
    loop_->stopping.store(true, std::memory_order_release);
    const uint64_t one = 1;
    while (::write(loop_->wake.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }
  if (thread_.joinable()) thread_.join();
  loop_.reset();
  spdlog::info("tcp segment server {}: stopped", address_);
}

}  // namespace tierkv::transport
