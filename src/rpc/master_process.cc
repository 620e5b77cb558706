#include "rpc/master_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "common/errno_text.h"
#include "common/exec_args.h"

namespace tierkv {
namespace {

constexpr std::string_view kListening = "tierkv master listening on ";
constexpr std::string_view kMetricsOn = "tierkv master metrics on ";
constexpr std::string_view kStoreServing = "tierkv store serving segment ";
constexpr std::string_view kStoreMetricsOn = "tierkv store metrics on ";

// "HOST:PORT" (HOST may be a bracketed IPv6 literal) into host (unbracketed) and port.
bool ParseAddress(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return false;
  *port = std::atoi(address.c_str() + colon + 1);
  if (*port <= 0 || *port > 65535) return false;
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[') *host = host->substr(1, host->size() - 2);
  return true;
}

std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "was killed by signal " + std::to_string(WTERMSIG(status));
  return "stopped (wait status " + std::to_string(status) + ")";
}

}  // namespace

std::string SelfExecutable() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, static_cast<size_t>(n));
}

Result<std::unique_ptr<MasterProcess>> MasterProcess::Start(const MasterProcessOptions& options) {
  if (options.binary.empty()) return Status(ErrorCode::INVALID_PARAMS, "no tierkv binary given");
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> args = {options.binary, options.command};
  args.insert(args.end(), options.args.begin(), options.args.end());
  const ExecArgs exec(std::move(args), options.env);

  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2");
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const Status st = ErrnoStatus("fork");
    close(fds[0]);
    close(fds[1]);
    return st;
  }
  if (pid == 0) {
    // Child. Die with the thread that started us; unblock every signal (a blocked SIGTERM
    // would survive exec).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (dup2(fds[1], STDOUT_FILENO) < 0) _exit(127);
    if (!options.stderr_path.empty()) {
      const int err =
          open(options.stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
      if (err < 0 || dup2(err, STDERR_FILENO) < 0) _exit(127);
    }
    exec.Exec();
    _exit(127);
  }
  close(fds[1]);
  std::unique_ptr<MasterProcess> child(new MasterProcess());
  child->pid_ = pid;
  child->stdout_fd_ = fds[0];

  // Read stdout until the "listening on" line (and the "metrics on" line after it, if asked
  // for), the deadline, or EOF (the child died).
  const auto deadline = std::chrono::steady_clock::now() + options.start_timeout;
  const char* waiting_for =
      options.command == "store" ? "it was serving its segment" : "it was listening";
  std::string buffer;
  for (;;) {
    const size_t newline = buffer.find('\n');
    if (newline != std::string::npos) {
      const std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      if (options.command == "store" && line.rfind(kStoreServing, 0) == 0) {
        const std::string rest = line.substr(kStoreServing.size());
        child->segment_name_ = rest.substr(0, rest.find(' '));
        if (!options.expect_metrics) return child;
        waiting_for = "it said where its metrics are";
        continue;
      }
      if (!child->segment_name_.empty() && line.rfind(kStoreMetricsOn, 0) == 0) {
        std::string metrics_host;
        if (!ParseAddress(line.substr(kStoreMetricsOn.size()), &metrics_host,
                          &child->metrics_port_)) {
          return Status(ErrorCode::INTERNAL_ERROR, "cannot parse the store's line: " + line);
        }
        return child;
      }
      if (line.rfind(kListening, 0) == 0) {
        if (!ParseAddress(line.substr(kListening.size()), &child->host_, &child->port_)) {
          return Status(ErrorCode::INTERNAL_ERROR, "cannot parse the master's line: " + line);
        }
        if (!options.expect_metrics) return child;
        waiting_for = "it said where its metrics are";
      } else if (child->port_ != 0 && line.rfind(kMetricsOn, 0) == 0) {
        std::string metrics_host;
        if (!ParseAddress(line.substr(kMetricsOn.size()), &metrics_host, &child->metrics_port_)) {
          return Status(ErrorCode::INTERNAL_ERROR, "cannot parse the master's line: " + line);
        }
        return child;
      }
      continue;  // not ours; keep reading
    }
    const auto left =
        std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      return Status(ErrorCode::INTERNAL_ERROR,
                    options.binary + " " + options.command + " did not say " + waiting_for +
                        " within " + std::to_string(options.start_timeout.count()) + " ms");
    }
    pollfd p{child->stdout_fd_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return ErrnoStatus("poll");
    if (ready == 0) continue;
    char chunk[512];
    const ssize_t n = read(child->stdout_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int status = 0;
      std::string how = "closed its stdout";
      if (child->WaitExit(Millis(2000), &status)) how = DescribeExit(status);
      return Status(ErrorCode::INTERNAL_ERROR,
                    options.binary + " " + options.command + " " + how + " before " + waiting_for);
    }
    buffer.append(chunk, static_cast<size_t>(n));
  }
}

bool MasterProcess::WaitExit(Millis timeout, int* status) {
  if (pid_ <= 0) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const pid_t r = waitpid(pid_, status, WNOHANG);
    if (r == pid_ || (r < 0 && errno == ECHILD)) {
      pid_ = -1;
      return true;
    }
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(Millis(5));
  }
}

void MasterProcess::Kill() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  if (stdout_fd_ >= 0) {
    close(stdout_fd_);
    stdout_fd_ = -1;
  }
}

std::optional<int> MasterProcess::Stop(Millis grace) {
  if (pid_ <= 0) return std::nullopt;
  kill(pid_, SIGTERM);
  int status = 0;
  if (WaitExit(grace, &status)) {
    Kill();  // closes the pipe
    return status;
  }
  Kill();
  return std::nullopt;
}

MasterProcess::~MasterProcess() { Kill(); }

}  // namespace tierkv
