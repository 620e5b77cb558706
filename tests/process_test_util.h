// Helpers of the multi-process tests that drive the real `tierkv` binary: run a command to its
// exit and capture its output, find a store's data port, and send raw bytes to a port.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/exec_args.h"
#include "distributed_test_util.h"
#include "net_test_util.h"

namespace tierkv::proc_test {

using namespace std::chrono_literals;

struct Exit {
  int code = -1;       // exit status, or -1 when killed / timed out
  std::string output;  // stdout and stderr together
};

// Runs `command` (argv[0] a path) with `env` added, its stdout and stderr to a file, and waits up
// to `timeout` for it to exit (then SIGKILL: code -1).
inline Exit RunCommand(const std::vector<std::string>& command,
                       const std::vector<std::pair<std::string, std::string>>& env = {},
                       std::chrono::milliseconds timeout = 20s) {
  char path[] = "/tmp/tierkv-hardening-out-XXXXXX";
  const int out_fd = mkstemp(path);
  EXPECT_GE(out_fd, 0);
  const ExecArgs exec(command, env);  // before fork: the child may not allocate
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    exec.Exec();
    _exit(127);
  }
  close(out_fd);
  Exit result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      if (WIFEXITED(status)) result.code = WEXITSTATUS(status);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  result.output = text.str();
  unlink(path);
  return result;
}

// Runs the tierkv binary under test with `args` (RunCommand's rules).
inline Exit RunToExit(const std::vector<std::string>& args,
                      const std::vector<std::pair<std::string, std::string>>& env = {},
                      std::chrono::milliseconds timeout = 20s) {
  std::vector<std::string> command = {dist_test::TestBinary()};
  command.insert(command.end(), args.begin(), args.end());
  return RunCommand(command, env, timeout);
}

inline int DataPort(const MasterProcess& store) {
  const std::string& name = store.segment_name();
  const size_t hash = name.find('#');
  const size_t colon = name.rfind(':');
  if (hash == std::string::npos || colon == std::string::npos || colon < hash) return 0;
  return std::atoi(name.c_str() + colon + 1);
}

inline int RawConnect(int port) { return test_util::ConnectLoopback(port); }

inline void SendAndClose(int port, const std::string& bytes, bool wait_for_close = false) {
  const int fd = RawConnect(port);
  if (fd < 0) return;
  (void)send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  if (wait_for_close) {
    pollfd p{fd, POLLIN, 0};
    char buf[256];
    const auto deadline = std::chrono::steady_clock::now() + 2s;
    while (std::chrono::steady_clock::now() < deadline) {
      if (poll(&p, 1, 50) > 0 && recv(fd, buf, sizeof(buf), 0) <= 0) break;
    }
  }
  close(fd);
}

// True while `pid` (a child of this process) has not exited.
inline bool StillRunning(pid_t pid) {
  int status = 0;
  return waitpid(pid, &status, WNOHANG) == 0;
}

// A 40-byte TKVT header with the given fields (the tcp transport's request layout).
inline std::string Frame(uint16_t op, uint64_t id, uint64_t offset, uint64_t length,
                         uint32_t data) {
  std::string f(40, '\0');
  std::memcpy(f.data(), "TKVT", 4);
  const uint16_t version = 2;  // kTcpProtocolVersion
  std::memcpy(f.data() + 4, &version, 2);
  std::memcpy(f.data() + 6, &op, 2);
  std::memcpy(f.data() + 8, &id, 8);
  std::memcpy(f.data() + 16, &offset, 8);
  std::memcpy(f.data() + 24, &length, 8);
  std::memcpy(f.data() + 32, &data, 4);
  return f;
}

}  // namespace tierkv::proc_test
