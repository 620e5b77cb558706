#include "rpc/meta_io.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <vector>

#include "common/errno_text.h"

namespace tierkv {
namespace {

int MillisLeft(MetaDeadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 1 << 30));
}

// Waits for `events` on fd until the deadline.
MetaIo Await(int fd, short events, MetaDeadline deadline, std::string* why) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, MillisLeft(deadline));
    if (rc > 0) return MetaIo::kOk;  // POLLHUP/POLLERR too: the next call says which
    if (rc == 0) return MetaIo::kTimeout;
    if (errno != EINTR) {
      *why = "poll: " + ErrnoText(errno);
      return MetaIo::kError;
    }
  }
}

}  // namespace

MetaIo SendAll(int fd, std::initializer_list<std::string_view> parts, MetaDeadline deadline,
               std::string* why) {
  std::vector<iovec> iov;
  iov.reserve(parts.size());
  for (std::string_view part : parts) {
    if (!part.empty()) iov.push_back({const_cast<char*>(part.data()), part.size()});
  }
  size_t first = 0;
  while (first < iov.size()) {
    msghdr msg{};
    msg.msg_iov = iov.data() + first;
    msg.msg_iovlen = iov.size() - first;
    const ssize_t sent = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (sent < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (MetaIo io = Await(fd, POLLOUT, deadline, why); io != MetaIo::kOk) return io;
        continue;
      }
      if (errno == EPIPE || errno == ECONNRESET) return MetaIo::kClosed;
      *why = "send: " + ErrnoText(errno);
      return MetaIo::kError;
    }
    size_t left = static_cast<size_t>(sent);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return MetaIo::kOk;
}

MetaIo RecvAll(int fd, void* out, size_t length, MetaDeadline deadline, std::string* why) {
  auto* at = static_cast<char*>(out);
  while (length > 0) {
    const ssize_t got = ::recv(fd, at, length, 0);
    if (got > 0) {
      at += got;
      length -= static_cast<size_t>(got);
      continue;
    }
    if (got == 0) return MetaIo::kClosed;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (MetaIo io = Await(fd, POLLIN, deadline, why); io != MetaIo::kOk) return io;
      continue;
    }
    if (errno == ECONNRESET) return MetaIo::kClosed;
    *why = "recv: " + ErrnoText(errno);
    return MetaIo::kError;
  }
  return MetaIo::kOk;
}

MetaIo AwaitReadable(int fd, MetaDeadline deadline, std::string* why) {
  return Await(fd, POLLIN, deadline, why);
}

std::string MetaIoText(MetaIo io, const std::string& why) {
  switch (io) {
    case MetaIo::kOk:
      return "ok";
    case MetaIo::kClosed:
      return "the connection was closed";
    case MetaIo::kTimeout:
      return "timed out";
    case MetaIo::kError:
      return why;
  }
  return why;
}

}  // namespace tierkv
