// Helpers shared by the transport tests (shm and UCX, unit and process tests, IPC paths).
#pragma once

#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "tierkv/status.h"

namespace tierkv::transport::testing {

using Millis = std::chrono::milliseconds;

// Polls `done` every 2 ms until it holds or `timeout` passes; returns its last value.
inline bool WaitUntil(const std::function<bool()>& done, Millis timeout = Millis(1000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(Millis(2));
  }
  return true;
}

// `status` is an error with `code` whose message contains every one of `needles`.
inline ::testing::AssertionResult Refused(const Status& status, ErrorCode code,
                                          const std::vector<std::string>& needles) {
  if (status.ok()) return ::testing::AssertionFailure() << "unexpectedly accepted";
  if (status.code() != code) {
    return ::testing::AssertionFailure() << "wrong code: " << status.ToString();
  }
  for (const std::string& needle : needles) {
    if (status.message().find(needle) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << status.message() << "\" lacks \"" << needle << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

// A forked child process, SIGKILLed and reaped on destruction unless reaped already.
class ReapedChild {
 public:
  explicit ReapedChild(pid_t pid) : pid_(pid) {}
  ~ReapedChild() { Kill(); }
  ReapedChild(const ReapedChild&) = delete;
  ReapedChild& operator=(const ReapedChild&) = delete;

  pid_t pid() const { return pid_; }
  // SIGKILLs and reaps the child (nothing if reaped already).
  void Kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    Wait();
  }
  // Reaps the child; returns its wait status.
  int Wait() {
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    return status;
  }

 private:
  pid_t pid_;
};

// A blocking Unix stream socket connected to `path`, or an invalid one.
inline UniqueFd RawConnect(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    return UniqueFd();
  }
  return fd;
}

inline bool SendBytes(int fd, const std::vector<uint8_t>& bytes) {
  return ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
}

// What the peer sent until it closed, and whether it closed within `timeout`. Descriptors that
// come along (SCM_RIGHTS) are counted and closed.
struct Received {
  std::vector<uint8_t> bytes;
  bool eof = false;
  int fds = 0;
};

inline Received ReadUntilEof(int fd, Millis timeout) {
  Received received;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const auto left =
        std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return received;
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    uint8_t chunk[256];
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    iovec iov{chunk, sizeof(chunk)};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int passed;
        std::memcpy(&passed, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        ::close(passed);
        ++received.fds;
      }
    }
    if (n <= 0) {
      received.eof = true;  // EOF, or ECONNRESET: closed either way
      return received;
    }
    received.bytes.insert(received.bytes.end(), chunk, chunk + n);
  }
}

// Gives each test its own TIERKV_IPC_DIR under the temp directory, restoring the variable and
// removing the directory afterwards.
class ScratchIpcDir {
 public:
  ScratchIpcDir() {
    if (const char* saved = std::getenv("TIERKV_IPC_DIR")) saved_ = saved;
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    // Short: socket paths must stay under 108 bytes.
    base_ = std::filesystem::temp_directory_path() /
            ("tkvshm" + std::to_string(::getpid()) + "_" +
             std::to_string(std::hash<std::string>()(info->name()) % 100000));
    std::filesystem::remove_all(base_);
    std::filesystem::create_directories(base_);
    ::setenv("TIERKV_IPC_DIR", base_.c_str(), 1);
  }
  ~ScratchIpcDir() {
    if (saved_) {
      ::setenv("TIERKV_IPC_DIR", saved_->c_str(), 1);
    } else {
      ::unsetenv("TIERKV_IPC_DIR");
    }
    std::error_code ignored;
    std::filesystem::remove_all(base_, ignored);
  }
  ScratchIpcDir(const ScratchIpcDir&) = delete;
  ScratchIpcDir& operator=(const ScratchIpcDir&) = delete;

  const std::filesystem::path& base() const { return base_; }

 private:
  std::optional<std::string> saved_;
  std::filesystem::path base_;
};

}  // namespace tierkv::transport::testing
