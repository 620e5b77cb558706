#include "tcp_stream.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>

namespace tierkv::bench {

bool WriteAll(int fd, const void* data, size_t size) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::send(fd, p, size, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t size) {
  auto* p = static_cast<uint8_t*>(data);
  while (size > 0) {
    const ssize_t n = ::recv(fd, p, size, MSG_WAITALL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

namespace {

// What the parent asks the child for: `objects` objects of `object_bytes` from the start of
// its pattern buffer, sent in writes of `write_bytes` (0: one send() loop per object);
// objects == 0 means exit.
struct StreamRequest {
  uint64_t object_bytes;
  uint64_t objects;
  uint64_t write_bytes;
};

// The child's body: connect, build the pattern, say ready, serve requests. Never returns.
[[noreturn]] void RunStreamChild(uint16_t port, uint64_t buffer_bytes, uint64_t seed) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) _exit(10);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) _exit(11);
  Result<AlignedBuffer> buffer = AlignedBuffer::Allocate(buffer_bytes);
  if (!buffer.ok()) _exit(12);
  FillPattern(buffer->data(), buffer->size(), seed);
  const char ready = 'r';
  if (!WriteAll(fd, &ready, 1)) _exit(13);
  for (;;) {
    StreamRequest request{};
    if (!ReadAll(fd, &request, sizeof(request))) _exit(14);
    if (request.objects == 0) _exit(0);
    const uint64_t total = request.objects * request.object_bytes;
    if (total > buffer->size()) _exit(15);
    const uint64_t unit = request.write_bytes == 0 ? request.object_bytes : request.write_bytes;
    for (uint64_t at = 0; at < total; at += unit) {
      if (!WriteAll(fd, buffer->data() + at, std::min(unit, total - at))) _exit(16);
    }
  }
}

}  // namespace

Result<std::unique_ptr<TcpStream>> TcpStream::Start(uint64_t buffer_bytes, uint64_t seed) {
  std::unique_ptr<TcpStream> stream(new TcpStream());
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) return Failed(std::string("socket: ") + std::strerror(errno));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = 0;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string error = std::strerror(errno);
    ::close(listener);
    return Failed("raw TCP baseline: cannot listen on 127.0.0.1: " + error);
  }
  const uint16_t port = ntohs(addr.sin_port);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(listener);
    return Failed(std::string("raw TCP baseline: fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) _exit(9);
    ::close(listener);
    RunStreamChild(port, buffer_bytes, seed);
  }
  stream->pid_ = pid;
  pollfd accept_poll{listener, POLLIN, 0};
  const int ready = ::poll(&accept_poll, 1, 10000);
  stream->fd_ = ready == 1 ? ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC) : -1;
  ::close(listener);
  if (stream->fd_ < 0) return Failed("raw TCP baseline: the child did not connect within 10 s");
  // The child allocates, pre-faults and fills its buffer, then says it is ready.
  pollfd ready_poll{stream->fd_, POLLIN, 0};
  char byte = 0;
  if (::poll(&ready_poll, 1, 60000) != 1 || !ReadAll(stream->fd_, &byte, 1) || byte != 'r') {
    return Failed("raw TCP baseline: the child did not get ready (allocating " +
                  FormatBytes(buffer_bytes) + ")");
  }
  return stream;
}

TcpStream::~TcpStream() {
  if (fd_ >= 0) ::close(fd_);
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
}

Result<double> TcpStream::Receive(TransferWorkload& workload, int rep, Mode mode) {
  workload.Poison(rep);
  const bool bulk = mode == Mode::kBulk;
  const StreamRequest request{workload.object_bytes(), workload.objects(),
                              bulk ? kBulkWriteBytes : 0};
  Stopwatch watch;
  if (!WriteAll(fd_, &request, sizeof(request))) return Failed("raw TCP baseline: send failed");
  if (bulk) {
    // The objects are contiguous in dst: one receive loop over all of them.
    if (!ReadAll(fd_, workload.dst_object(0), workload.total_bytes())) {
      return Failed("raw TCP baseline: the child's bulk stream ended early");
    }
  } else {
    for (size_t i = 0; i < workload.objects(); ++i) {
      if (!ReadAll(fd_, workload.dst_object(i), workload.object_bytes())) {
        return Failed("raw TCP baseline: the child's stream ended early (object " +
                      std::to_string(i) + ")");
      }
    }
  }
  const double seconds = watch.Seconds();
  if (Status s = workload.CheckBytes(rep, bulk ? "raw TCP bulk stream" : "raw TCP stream");
      !s.ok()) {
    return s;
  }
  return seconds;
}

Status TcpStream::Stop() {
  const StreamRequest bye{0, 0, 0};
  const bool sent = WriteAll(fd_, &bye, sizeof(bye));
  int wstatus = 0;
  pid_t reaped = -1;
  while ((reaped = ::waitpid(pid_, &wstatus, 0)) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (!sent || reaped < 0 || !WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
    return Failed("raw TCP baseline: the child did not exit cleanly (status " +
                  std::to_string(wstatus) + ")");
  }
  return Status::Ok();
}

}  // namespace tierkv::bench
