#include "transport/shm_segment_client.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <system_error>
#include <thread>
#include <utility>

#include "common/errno_text.h"
#include "transport/shm_protocol.h"

namespace tierkv::transport {

// An eventfd shared by the mapper and every segment it mapped, so that a segment destroyed after
// its mapper still has something valid to poke.
class ShmWaker {
 public:
  explicit ShmWaker(UniqueFd fd) : fd_(std::move(fd)) {}
  int fd() const { return fd_.get(); }
  void Wake() const {
    const uint64_t one = 1;
    while (::write(fd_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }
  void Drain() const {
    uint64_t count;
    while (::read(fd_.get(), &count, sizeof(count)) < 0 && errno == EINTR) {
    }
  }

 private:
  const UniqueFd fd_;
};

// The handshake connection of one mapping. `alive` only ever goes from true to false.
struct ShmLink {
  explicit ShmLink(UniqueFd s) : socket(std::move(s)) {}
  const UniqueFd socket;
  std::atomic<bool> alive{true};

  void MarkDead() { alive.store(false, std::memory_order_release); }
};

namespace {

using Clock = std::chrono::steady_clock;

// While the server's backlog is full, connect is retried this often until the deadline.
constexpr std::chrono::milliseconds kConnectRetry{2};
// Enough room for a few descriptors: extras (a confused server) are closed, not leaked.
constexpr size_t kMaxReceivedFds = 4;

class MapError {
 public:
  MapError(const std::string& path, const std::string& name)
      : prefix_("shm map of segment '" + name + "' via \"" + path + "\": ") {}
  Status operator()(ErrorCode code, const std::string& what) const {
    return Status(code, prefix_ + what);
  }
  Status System(const char* call, int error) const {
    return Status(ErrorCode::TRANSFER_FAIL, prefix_ + call + ": " + ErrnoText(error));
  }

 private:
  std::string prefix_;
};

int MillisLeft(Clock::time_point deadline) {
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, std::numeric_limits<int>::max()));
}

// Waits for `events` on `fd` until the deadline: 1 ready, 0 timed out, -1 error (errno set).
int WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd pfd{fd, events, 0};
    const int rc = ::poll(&pfd, 1, MillisLeft(deadline));
    if (rc < 0 && errno == EINTR) continue;
    return rc;
  }
}

Status Connect(int fd, const std::string& path, Clock::time_point deadline, const MapError& error) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  while (true) {
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) == 0) {
      return Status::Ok();
    }
    if (errno == EINTR) continue;
    // A Unix stream connect does not go "in progress": EAGAIN means the backlog is full.
    if (errno != EAGAIN && errno != EINPROGRESS) return error.System("connect", errno);
    if (MillisLeft(deadline) == 0) {
      return error(ErrorCode::TRANSFER_FAIL, "connect: timed out (the server's backlog is full)");
    }
    std::this_thread::sleep_for(kConnectRetry);
  }
}

Status SendAll(int fd, const std::vector<uint8_t>& bytes, Clock::time_point deadline,
               const MapError& error) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
      return error.System("sending the request", errno);
    }
    const int ready = WaitFor(fd, POLLOUT, deadline);
    if (ready < 0) return error.System("poll", errno);
    if (ready == 0) return error(ErrorCode::TRANSFER_FAIL, "timed out sending the request");
  }
  return Status::Ok();
}

struct RawReply {
  std::vector<uint8_t> bytes;
  UniqueFd memfd;  // the first descriptor received, if any
};

// Reads exactly kShmReplySize bytes and the descriptor that comes with the first of them.
Result<RawReply> ReceiveReply(int fd, Clock::time_point deadline, const MapError& error) {
  RawReply reply;
  reply.bytes.resize(kShmReplySize);
  size_t have = 0;
  while (have < kShmReplySize) {
    iovec iov{reply.bytes.data() + have, kShmReplySize - have};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxReceivedFds)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int ready = WaitFor(fd, POLLIN, deadline);
      if (ready < 0) return error.System("poll", errno);
      if (ready == 0) {
        return error(ErrorCode::TRANSFER_FAIL, "timed out waiting for the server's reply");
      }
      continue;
    }
    if (n < 0) return error.System("receiving the reply", errno);
    // Take ownership of every descriptor before judging anything, so none leaks.
    for (cmsghdr* cmsg = CMSG_FIRSTHDR(&msg); cmsg != nullptr; cmsg = CMSG_NXTHDR(&msg, cmsg)) {
      if (cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (cmsg->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(cmsg) + i * sizeof(int), sizeof(int));
        UniqueFd owned(received);
        if (!reply.memfd.valid()) reply.memfd = std::move(owned);
      }
    }
    if ((msg.msg_flags & MSG_CTRUNC) != 0) {
      return error(ErrorCode::TRANSFER_FAIL, "the reply carried more descriptors than expected");
    }
    if (n == 0) {
      return error(ErrorCode::TRANSFER_FAIL,
                   "the server closed the connection after " + std::to_string(have) + " of " +
                       std::to_string(kShmReplySize) +
                       " reply bytes (it closes peers of another uid and unreadable requests; "
                       "see its log)");
    }
    have += static_cast<size_t>(n);
  }
  return reply;
}

}  // namespace

MappedSegment::MappedSegment(uint8_t* base, uint64_t size, uint64_t page_size, std::string name,
                             std::string socket_path, std::shared_ptr<ShmLink> link,
                             std::shared_ptr<ShmWaker> waker)
    : base_(base),
      size_(size),
      page_size_(page_size),
      name_(std::move(name)),
      socket_path_(std::move(socket_path)),
      link_(std::move(link)),
      waker_(std::move(waker)) {}

bool MappedSegment::alive() const {
  if (!link_->alive.load(std::memory_order_acquire)) return false;
  // The server never writes after its reply: any event is a hang-up, an error or a broken
  // protocol. A store killed before this call has had its end closed by the kernel already.
  pollfd pfd{link_->socket.get(), POLLIN | POLLRDHUP, 0};
  int ready;
  do {
    ready = ::poll(&pfd, 1, 0);
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) return false;  // cannot tell (ENOMEM): not alive for this call, not marked dead
  if (ready > 0 && pfd.revents != 0) {
    link_->MarkDead();
    return false;
  }
  // The mapper may have been destroyed (shutting the connection down) since the first load.
  return link_->alive.load(std::memory_order_acquire);
}

MappedSegment::~MappedSegment() {
  ::munmap(base_, size_);
  if (waker_ != nullptr) waker_->Wake();
}

ShmSegmentMapper::~ShmSegmentMapper() {
  std::shared_ptr<ShmWaker> waker;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    waker = waker_;
  }
  if (waker != nullptr) waker->Wake();
  if (watcher_.joinable()) watcher_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (Watched& entry : watched_) {
    entry.link->MarkDead();
    // Not close: a segment that outlives us may be polling the descriptor in alive().
    ::shutdown(entry.link->socket.get(), SHUT_RDWR);
  }
  watched_.clear();
}

size_t ShmSegmentMapper::watched_connections() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watched_.size();
}

Status ShmSegmentMapper::StartWatcherLocked() {
  if (waker_ != nullptr) return Status::Ok();
  UniqueFd fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!fd.valid()) {
    return Status(ErrorCode::INTERNAL_ERROR, "shm segment mapper: eventfd: " + ErrnoText(errno));
  }
  auto waker = std::make_shared<ShmWaker>(std::move(fd));
  try {
    watcher_ = std::thread([this] { Watch(); });
  } catch (const std::system_error& e) {
    return Status(ErrorCode::INTERNAL_ERROR,
                  std::string("shm segment mapper: starting the watcher thread: ") + e.what());
  }
  waker_ = std::move(waker);
  return Status::Ok();
}

Result<std::shared_ptr<MappedSegment>> ShmSegmentMapper::Map(const std::string& socket_path,
                                                             const std::string& segment_name,
                                                             std::chrono::milliseconds timeout) {
  // Saturates: a timeout of years means "no deadline", not an overflow.
  const auto bounded = std::clamp(timeout, std::chrono::milliseconds(0),
                                  std::chrono::milliseconds(std::chrono::hours(24 * 365)));
  const Clock::time_point deadline = Clock::now() + bounded;
  const MapError error(socket_path, segment_name.substr(0, 256));
  if (socket_path.empty() || socket_path.size() >= sizeof(sockaddr_un::sun_path)) {
    return error(ErrorCode::INVALID_PARAMS, "a Unix socket path must be 1.." +
                                                std::to_string(sizeof(sockaddr_un::sun_path) - 1) +
                                                " bytes, this one is " +
                                                std::to_string(socket_path.size()));
  }
  if (segment_name.empty() || segment_name.size() > kShmMaxNameLength) {
    return error(ErrorCode::INVALID_PARAMS,
                 "the segment name must be 1.." + std::to_string(kShmMaxNameLength) +
                     " bytes, this one is " + std::to_string(segment_name.size()));
  }

  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock.valid()) return error.System("socket", errno);
  if (Status status = Connect(sock.get(), socket_path, deadline, error); !status.ok()) {
    return status;
  }
  // The peer's credentials as of its listen(): a server of another uid could hand us memory
  // it controls, or learn which segments we use.
  ucred cred{};
  socklen_t cred_length = sizeof(cred);
  if (::getsockopt(sock.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cred_length) != 0) {
    return error.System("SO_PEERCRED", errno);
  }
  if (cred.uid != ::geteuid()) {
    return error(ErrorCode::TRANSFER_FAIL, "the server (pid " + std::to_string(cred.pid) +
                                               ") runs as uid " + std::to_string(cred.uid) +
                                               ", not our uid " + std::to_string(::geteuid()) +
                                               "; refusing it");
  }
  if (Status status = SendAll(sock.get(), EncodeShmRequest(segment_name), deadline, error);
      !status.ok()) {
    return status;
  }
  Result<RawReply> raw = ReceiveReply(sock.get(), deadline, error);
  if (!raw.ok()) return raw.status();
  Result<ShmReply> reply = DecodeShmReply(raw->bytes.data(), raw->bytes.size());
  if (!reply.ok()) return error(ErrorCode::TRANSFER_FAIL, reply.status().message());
  if (reply->status != 0) {
    const auto code = static_cast<ErrorCode>(reply->status);
    const std::string_view code_name = ErrorCodeName(code);
    if (code_name == "UNKNOWN") {
      return error(ErrorCode::TRANSFER_FAIL,
                   "the server refused with unknown status " + std::to_string(reply->status));
    }
    std::string what = "the server refused: " + std::string(code_name);
    if (code == ErrorCode::SEGMENT_NOT_FOUND) what += " (it serves another segment)";
    if (reply->version != kShmProtocolVersion) {
      what += " (it speaks protocol version " + std::to_string(reply->version) + ", we speak " +
              std::to_string(kShmProtocolVersion) + ")";
    }
    return error(code, what);
  }
  if (reply->version != kShmProtocolVersion) {
    return error(ErrorCode::TRANSFER_FAIL,
                 "the server replied with protocol version " + std::to_string(reply->version));
  }
  if (!raw->memfd.valid()) {
    return error(ErrorCode::TRANSFER_FAIL, "the server's reply carried no descriptor");
  }
  struct stat st;
  if (::fstat(raw->memfd.get(), &st) != 0) return error.System("fstat (received memfd)", errno);
  const uint64_t size = reply->segment_size;
  if (size == 0 || size > static_cast<uint64_t>(std::numeric_limits<off_t>::max()) ||
      static_cast<uint64_t>(st.st_size) < size) {
    return error(ErrorCode::TRANSFER_FAIL, "the server reported " + std::to_string(size) +
                                               " bytes for a file of " +
                                               std::to_string(st.st_size) + " bytes");
  }
  void* base =
      ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, raw->memfd.get(), 0);
  if (base == MAP_FAILED) {
    return error(ErrorCode::INTERNAL_ERROR,
                 "mmap of " + std::to_string(size) + " bytes: " + ErrnoText(errno));
  }
  raw->memfd.Reset();  // the mapping keeps the memory

  std::lock_guard<std::mutex> lock(mu_);
  Status started = stopping_ ? Status(ErrorCode::INTERNAL_ERROR, "shm segment mapper: stopping")
                             : StartWatcherLocked();
  auto link = std::make_shared<ShmLink>(std::move(sock));
  // Built even on failure, so that its destructor unmaps.
  std::shared_ptr<MappedSegment> segment(new MappedSegment(static_cast<uint8_t*>(base), size,
                                                           reply->page_size, segment_name,
                                                           socket_path, link, waker_));
  if (!started.ok()) {
    link->MarkDead();
    return error(started.code(), started.message());
  }
  watched_.push_back(Watched{std::move(link), segment});
  waker_->Wake();
  return segment;
}

void ShmSegmentMapper::Watch() {
  std::vector<pollfd> fds;
  std::shared_ptr<ShmWaker> waker;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stopping_) return;
      // waker_ is set right after this thread starts, under the lock this thread waits for.
      waker = waker_;
      // Close the connections of segments destroyed while alive.
      std::erase_if(watched_, [](const Watched& entry) { return entry.segment.expired(); });
      fds.clear();
      fds.push_back({waker->fd(), POLLIN, 0});
      for (const Watched& entry : watched_) {
        fds.push_back({entry.link->socket.get(), POLLIN | POLLRDHUP, 0});
      }
    }
    const int ready = ::poll(fds.data(), fds.size(), -1);
    if (ready < 0) {
      if (errno == EINTR) continue;
      spdlog::error("shm segment mapper: poll: {}; segments are no longer watched",
                    ErrnoText(errno));
      std::lock_guard<std::mutex> lock(mu_);
      for (Watched& entry : watched_) {
        entry.link->MarkDead();
        ::shutdown(entry.link->socket.get(), SHUT_RDWR);
      }
      watched_.clear();
      return;
    }
    if (fds[0].revents != 0) waker->Drain();
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      // The server never writes after its reply: any event is a hang-up, an error, or a server
      // that broke the protocol. Either way the segment is no longer served.
      const int fd = fds[i].fd;
      auto it = std::find_if(watched_.begin(), watched_.end(),
                             [fd](const Watched& entry) { return entry.link->socket.get() == fd; });
      if (it == watched_.end()) continue;
      it->link->MarkDead();
      if (auto segment = it->segment.lock()) {
        spdlog::info("shm segment mapper: segment '{}' at \"{}\" is gone (server hung up)",
                     segment->name(), segment->socket_path());
      }
      watched_.erase(it);
    }
  }
}

}  // namespace tierkv::transport
