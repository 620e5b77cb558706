#include "transport/shm_segment_server.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "common/errno_text.h"
#include "transport/ipc_path.h"
#include "transport/shm_protocol.h"

namespace tierkv::transport {
namespace {

using Clock = std::chrono::steady_clock;

// After accept fails for lack of descriptors or memory, the listener rests this long (the
// pending peer stays in the backlog) instead of spinning on a readable listener.
constexpr std::chrono::milliseconds kShmAcceptBackoff{100};

Status PathError(ErrorCode code, const std::string& path, const std::string& what) {
  return Status(code, "shm segment server \"" + path + "\": " + what);
}

Status SystemError(ErrorCode code, const std::string& path, const char* call, int error) {
  return PathError(code, path, std::string(call) + ": " + ErrnoText(error));
}

std::string FileKind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symlink";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device node";
  return "not a socket";
}

sockaddr_un UnixSocketAddress(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

// Removes a socket file nobody listens on; refuses any other file and a live socket.
Status RemoveStaleSocket(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return SystemError(ErrorCode::FILE_OPEN_FAIL, path, "lstat", errno);
  }
  if (!S_ISSOCK(st.st_mode)) {
    return PathError(ErrorCode::INVALID_CONFIG, path,
                     "exists and is " + FileKind(st.st_mode) +
                         ", not a socket; refusing to replace it (remove it or pick another "
                         "socket name)");
  }
  UniqueFd probe(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!probe.valid()) return SystemError(ErrorCode::INTERNAL_ERROR, path, "socket", errno);
  const sockaddr_un address = UnixSocketAddress(path);
  int rc;
  do {
    rc = ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0 || errno == EAGAIN || errno == EINPROGRESS) {
    return PathError(ErrorCode::INVALID_CONFIG, path,
                     "another server is listening on this socket; refusing to take it over");
  }
  if (errno != ECONNREFUSED) {
    return SystemError(ErrorCode::FILE_OPEN_FAIL, path, "connect (probing an existing socket)",
                       errno);
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return SystemError(ErrorCode::FILE_OPEN_FAIL, path, "unlink (stale socket)", errno);
  }
  spdlog::info("shm segment server \"{}\": removed a stale socket file", path);
  return Status::Ok();
}

// The pid in "<prefix><pid>-<n>.sock", or -1 when `name` is not of that form.
pid_t PidOfSocketName(const std::string& name, const std::string& prefix) {
  static constexpr std::string_view kSuffix = ".sock";
  if (name.size() <= prefix.size() + kSuffix.size() ||
      name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return -1;
  }
  const std::string middle =
      name.substr(prefix.size(), name.size() - prefix.size() - kSuffix.size());
  const size_t dash = middle.find('-');
  if (dash == 0 || dash == std::string::npos || dash + 1 == middle.size() || dash > 9 ||
      middle.find_first_not_of("0123456789-") != std::string::npos ||
      middle.find('-', dash + 1) != std::string::npos) {
    return -1;
  }
  const long pid = std::stol(middle.substr(0, dash));
  return pid > 0 ? static_cast<pid_t>(pid) : -1;
}

bool ValidSocketName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// One peer, from accept to close. Owned by the event loop.
struct Connection {
  UniqueFd fd;
  pid_t pid = 0;
  uid_t uid = 0;
  bool established = false;
  std::vector<uint8_t> request;  // bytes received so far
  size_t needed = kShmRequestHeaderSize;
  Clock::time_point deadline;
};

}  // namespace

Result<size_t> RemoveDeadProcessSockets(const std::string& prefix) {
  const std::string dir = IpcDir();
  DIR* listing = ::opendir(dir.c_str());
  if (listing == nullptr) {
    if (errno == ENOENT) return size_t{0};
    return SystemError(ErrorCode::FILE_OPEN_FAIL, dir, "opendir", errno);
  }
  std::vector<std::string> names;
  while (const dirent* entry = ::readdir(listing)) names.emplace_back(entry->d_name);
  ::closedir(listing);
  size_t removed = 0;
  for (const std::string& name : names) {
    const pid_t pid = PidOfSocketName(name, prefix);
    if (pid < 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (EPERM: another user's pid)
    const std::string path = dir + "/" + name;
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    // RemoveStaleSocket refuses a socket someone listens on (a live process of another pid
    // namespace that shares this directory).
    if (Status status = RemoveStaleSocket(path); !status.ok()) {
      spdlog::warn("shm segment server: keeping \"{}\" (pid {} is gone): {}", path, pid,
                   status.ToString());
      continue;
    }
    ++removed;
  }
  if (removed != 0) {
    spdlog::info("shm segment server: removed {} socket files of dead processes from {}", removed,
                 dir);
  }
  return removed;
}

Result<std::unique_ptr<ShmSegmentServer>> ShmSegmentServer::Start(
    const std::string& socket_name, std::shared_ptr<MemorySegment> segment,
    ShmSegmentServerOptions options) {
  using R = Result<std::unique_ptr<ShmSegmentServer>>;
  if (segment == nullptr) return R(ErrorCode::INVALID_PARAMS, "shm segment server: no segment");
  if (!ValidSocketName(socket_name)) {
    return R(ErrorCode::INVALID_PARAMS, "shm segment server: socket name \"" + socket_name +
                                            "\" must be one non-empty path component");
  }
  const std::string path = IpcPath(socket_name);
  // Checked before EnsureIpcDir so that a rejected configuration leaves nothing behind.
  if (path.size() >= sizeof(sockaddr_un::sun_path)) {
    return R(ErrorCode::INVALID_CONFIG, "shm segment server: socket path \"" + path + "\" is " +
                                            std::to_string(path.size()) +
                                            " bytes; a Unix socket path must be under " +
                                            std::to_string(sizeof(sockaddr_un::sun_path)) +
                                            " (shorten TIERKV_IPC_DIR or the socket name)");
  }
  if (Status status = EnsureIpcDir(); !status.ok()) return status;
  if (Status status = RemoveStaleSocket(path); !status.ok()) return status;

  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener.valid()) return SystemError(ErrorCode::INTERNAL_ERROR, path, "socket", errno);
  const sockaddr_un address = UnixSocketAddress(path);
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return SystemError(ErrorCode::FILE_OPEN_FAIL, path, "bind", errno);
  }
  // From here on every failure removes the file it made. The directory is 0700, so nobody else
  // could reach the socket before the chmod.
  auto fail = [&path](Status status) {
    ::unlink(path.c_str());
    return status;
  };
  if (::chmod(path.c_str(), 0600) != 0) {
    return fail(SystemError(ErrorCode::FILE_OPEN_FAIL, path, "chmod 0600", errno));
  }
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    return fail(SystemError(ErrorCode::FILE_OPEN_FAIL, path, "lstat", errno));
  }
  if (::listen(listener.get(), SOMAXCONN) != 0) {
    return fail(SystemError(ErrorCode::INTERNAL_ERROR, path, "listen", errno));
  }
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake.valid()) return fail(SystemError(ErrorCode::INTERNAL_ERROR, path, "eventfd", errno));

  std::unique_ptr<ShmSegmentServer> server(
      new ShmSegmentServer(path, std::move(segment), options, std::move(listener), std::move(wake),
                           st.st_dev, st.st_ino));
  try {
    server->thread_ = std::thread([raw = server.get()] { raw->Run(); });
  } catch (const std::system_error& e) {
    server->stopped_ = true;  // nothing to join; the destructor only closes descriptors
    return fail(PathError(ErrorCode::INTERNAL_ERROR, path,
                          std::string("starting the server thread: ") + e.what()));
  }
  spdlog::info("shm segment server \"{}\": serving segment '{}' ({} bytes)", path,
               server->segment_->name(), server->segment_->size());
  return server;
}

ShmSegmentServer::ShmSegmentServer(std::string path, std::shared_ptr<MemorySegment> segment,
                                   ShmSegmentServerOptions options, UniqueFd listener,
                                   UniqueFd wake, dev_t dev, ino_t ino)
    : path_(std::move(path)),
      segment_(std::move(segment)),
      options_(options),
      socket_dev_(dev),
      socket_ino_(ino),
      listener_(std::move(listener)),
      wake_(std::move(wake)) {}

ShmSegmentServer::~ShmSegmentServer() { Stop(); }

void ShmSegmentServer::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  const uint64_t one = 1;
  while (::write(wake_.get(), &one, sizeof(one)) < 0 && errno == EINTR) {
  }
  if (thread_.joinable()) thread_.join();
  listener_.Reset();
  // Unlink only the file we bound: a later server may have replaced a socket we left behind.
  struct stat st;
  if (::lstat(path_.c_str(), &st) == 0 && st.st_dev == socket_dev_ && st.st_ino == socket_ino_) {
    ::unlink(path_.c_str());
  }
  spdlog::info("shm segment server \"{}\": stopped", path_);
}

void ShmSegmentServer::Run() {
  std::vector<std::unique_ptr<Connection>> connections;
  std::vector<pollfd> fds;
  Clock::time_point listener_rests_until{};
  const uid_t our_uid = ::geteuid();
  const std::string& wanted_name = segment_->name();

  auto close_at = [&](size_t index) {
    connections.erase(connections.begin() + static_cast<std::ptrdiff_t>(index));
    open_connections_.store(connections.size(), std::memory_order_relaxed);
  };
  // Sends a reply, with the memfd when `status` is 0. The socket buffer is empty and the reply
  // is small, so a non-blocking send either takes all of it or the peer is broken.
  auto reply = [&](Connection& conn, ErrorCode status) -> bool {
    ShmReply message;
    message.status = ToInt(status);
    if (status == ErrorCode::OK) {
      message.segment_size = segment_->size();
      message.page_size = segment_->page_size();
    }
    std::vector<uint8_t> bytes = EncodeShmReply(message);
    iovec iov{bytes.data(), bytes.size()};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
    if (status == ErrorCode::OK) {
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
      cmsg->cmsg_level = SOL_SOCKET;
      cmsg->cmsg_type = SCM_RIGHTS;
      cmsg->cmsg_len = CMSG_LEN(sizeof(int));
      const int segment_fd = segment_->fd();
      std::memcpy(CMSG_DATA(cmsg), &segment_fd, sizeof(int));
    }
    ssize_t sent;
    do {
      sent = ::sendmsg(conn.fd.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (sent < 0 && errno == EINTR);
    if (sent != static_cast<ssize_t>(bytes.size())) {
      spdlog::warn("shm segment server \"{}\": reply to pid {} failed: {}", path_, conn.pid,
                   sent < 0 ? ErrnoText(errno) : "short send");
      return false;
    }
    return true;
  };
  // Reads what the handshake still needs. Returns false when the connection must close.
  auto advance_handshake = [&](Connection& conn) -> bool {
    while (conn.request.size() < conn.needed) {
      const size_t have = conn.request.size();
      conn.request.resize(conn.needed);
      ssize_t n;
      do {
        n = ::read(conn.fd.get(), conn.request.data() + have, conn.needed - have);
      } while (n < 0 && errno == EINTR);
      conn.request.resize(have + static_cast<size_t>(std::max<ssize_t>(n, 0)));
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;  // more later
      if (n <= 0) {
        spdlog::debug("shm segment server \"{}\": pid {} left during the handshake ({})", path_,
                      conn.pid, n == 0 ? "EOF" : ErrnoText(errno));
        return false;
      }
      if (conn.request.size() == kShmRequestHeaderSize && conn.needed == kShmRequestHeaderSize) {
        if (!HasShmMagic(conn.request.data(), conn.request.size())) {
          spdlog::warn("shm segment server \"{}\": pid {} sent a request without the magic", path_,
                       conn.pid);
          return false;
        }
        Result<size_t> total = DecodeShmRequestHeader(conn.request.data(), conn.request.size());
        if (!total.ok()) {
          spdlog::warn("shm segment server \"{}\": pid {}: {}", path_, conn.pid,
                       total.status().message());
          reply(conn, total.code());
          return false;
        }
        conn.needed = *total;
      }
    }
    Result<ShmRequest> request = DecodeShmRequest(conn.request.data(), conn.request.size());
    if (!request.ok()) {  // unreachable after the header check; kept for safety
      reply(conn, request.code());
      return false;
    }
    if (request->segment_name != wanted_name) {
      spdlog::warn("shm segment server \"{}\": pid {} asked for segment '{}', this is '{}'", path_,
                   conn.pid, request->segment_name.substr(0, 256), wanted_name);
      reply(conn, ErrorCode::SEGMENT_NOT_FOUND);
      return false;
    }
    if (!reply(conn, ErrorCode::OK)) return false;
    conn.established = true;
    std::vector<uint8_t>().swap(conn.request);
    spdlog::debug("shm segment server \"{}\": mapped by pid {}", path_, conn.pid);
    return true;
  };
  auto accept_all = [&](Clock::time_point now) {
    while (true) {
      UniqueFd fd(::accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (!fd.valid()) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        if (errno == EINTR || errno == ECONNABORTED) continue;
        spdlog::warn("shm segment server \"{}\": accept: {}; pausing accepts for {} ms", path_,
                     ErrnoText(errno), kShmAcceptBackoff.count());
        listener_rests_until = now + kShmAcceptBackoff;
        return;
      }
      ucred cred{};
      socklen_t length = sizeof(cred);
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &length) != 0) {
        spdlog::warn("shm segment server \"{}\": SO_PEERCRED: {}; closing the connection", path_,
                     ErrnoText(errno));
        continue;
      }
      if (cred.uid != our_uid) {
        spdlog::warn(
            "shm segment server \"{}\": refused pid {} uid {}: only uid {} may map this segment",
            path_, cred.pid, cred.uid, our_uid);
        continue;
      }
      if (connections.size() >= options_.max_connections) {
        spdlog::warn("shm segment server \"{}\": {} connections open; closing the one from pid {}",
                     path_, connections.size(), cred.pid);
        continue;
      }
      auto conn = std::make_unique<Connection>();
      conn->fd = std::move(fd);
      conn->pid = cred.pid;
      conn->uid = cred.uid;
      conn->deadline = now + options_.handshake_timeout;
      conn->request.reserve(kShmRequestHeaderSize);
      connections.push_back(std::move(conn));
      open_connections_.store(connections.size(), std::memory_order_relaxed);
    }
  };

  while (true) {
    Clock::time_point now = Clock::now();
    const bool listening = now >= listener_rests_until;
    fds.clear();
    fds.push_back({wake_.get(), POLLIN, 0});
    fds.push_back({listening ? listener_.get() : -1, POLLIN, 0});
    Clock::time_point wake_by = Clock::time_point::max();
    if (!listening) wake_by = listener_rests_until;
    for (const auto& conn : connections) {
      fds.push_back({conn->fd.get(), POLLIN | POLLRDHUP, 0});
      if (!conn->established) wake_by = std::min(wake_by, conn->deadline);
    }
    int timeout_ms = -1;
    if (wake_by != Clock::time_point::max()) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake_by - now).count();
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left, 0, 60'000));
    }
    const int ready = ::poll(fds.data(), fds.size(), timeout_ms);
    if (ready < 0 && errno != EINTR) {
      spdlog::error("shm segment server \"{}\": poll: {}; stopping", path_, ErrnoText(errno));
      break;
    }
    if (ready > 0 && fds[0].revents != 0) break;  // Stop()
    now = Clock::now();
    // Connections first (back to front, so erasing keeps the indexes of those not yet seen);
    // fds[i + 2] belongs to connections[i].
    for (size_t i = connections.size(); i-- > 0;) {
      Connection& conn = *connections[i];
      const short revents = ready > 0 ? fds[i + 2].revents : 0;
      bool keep = true;
      if (conn.established) {
        if (revents != 0) {
          // The requester never writes after the handshake: EOF means it unmapped or died.
          char byte;
          const ssize_t n = ::recv(conn.fd.get(), &byte, 1, MSG_DONTWAIT);
          if (n > 0) {
            spdlog::warn("shm segment server \"{}\": pid {} wrote after the handshake; closing",
                         path_, conn.pid);
            keep = false;
          } else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            keep = false;
          }
        }
      } else {
        if (revents != 0) keep = advance_handshake(conn);
        if (keep && !conn.established && now >= conn.deadline) {
          spdlog::warn(
              "shm segment server \"{}\": pid {} sent {} of {} request bytes in {} ms; closing",
              path_, conn.pid, conn.request.size(), conn.needed,
              options_.handshake_timeout.count());
          keep = false;
        }
      }
      if (!keep) close_at(i);
    }
    if (listening && ready > 0 && fds[1].revents != 0) accept_all(now);
  }
  connections.clear();
  open_connections_.store(0, std::memory_order_relaxed);
}

}  // namespace tierkv::transport
