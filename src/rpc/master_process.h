// MasterProcess: a `tierkv master` (or `tierkv store`) child process, for the remote metadata bench
// and the multi-process integration tests.
//
// Start() runs `<binary> master <args...>` with its stdout on a pipe, waits for the line
// "tierkv master listening on HOST:PORT" (so `--port 0` works: the child picks a free port and
// says which) — and, with `expect_metrics`, for the "tierkv master metrics on HOST:PORT" line
// after it — and returns. The child's stderr (its logs) goes to this process's stderr. The
// child gets SIGKILL if the thread that started it dies (PR_SET_PDEATHSIG), and the destructor
// kills and reaps it: every process started is stopped, even when a test fails.
// Thread-safety: none (one owner).
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "tierkv/status.h"

namespace tierkv {

struct MasterProcessOptions {
  std::string binary;  // the tierkv executable
  // The subcommand: "master", or "store" (then Start waits for "tierkv store serving segment
  // NAME ..." instead, and segment_name() is NAME).
  std::string command = "master";
  std::vector<std::string> args;  // after the subcommand, e.g. {"--port", "0"}
  // Environment variables set (or overridden) in the child; the rest is inherited.
  std::vector<std::pair<std::string, std::string>> env;
  Millis start_timeout{15000};  // for the "listening on" line (and the "metrics on" line)
  // Also wait for "tierkv master metrics on HOST:PORT" (a store: "tierkv store metrics on
  // HOST:PORT"); pass a --metrics-port that is not -1.
  bool expect_metrics = false;
  // Where the child's stderr (its logs) goes, appended; "" = this process's stderr.
  std::string stderr_path;
};

class MasterProcess {
 public:
  // INTERNAL_ERROR if the process cannot be started, or exits / stays silent before the line.
  static Result<std::unique_ptr<MasterProcess>> Start(const MasterProcessOptions& options);
  ~MasterProcess();  // Kill() if still running
  MasterProcess(const MasterProcess&) = delete;
  MasterProcess& operator=(const MasterProcess&) = delete;

  pid_t pid() const { return pid_; }
  const std::string& host() const { return host_; }
  int port() const { return port_; }
  std::string address() const { return host_ + ":" + std::to_string(port_); }
  // The metrics HTTP port (expect_metrics), else 0.
  int metrics_port() const { return metrics_port_; }
  // The mounted segment name a store printed (command "store"), else "".
  const std::string& segment_name() const { return segment_name_; }

  // SIGKILL and reap. Idempotent.
  void Kill();
  // SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status as waitpid reports it
  // (use WIFEXITED/WEXITSTATUS), or nullopt if it had to be killed.
  std::optional<int> Stop(Millis grace = Millis(5000));
  bool running() const { return pid_ > 0; }

 private:
  MasterProcess() = default;
  // Waits up to `timeout` for the child to exit; true (and reaped) if it did.
  bool WaitExit(Millis timeout, int* status);

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string host_;
  int port_ = 0;
  int metrics_port_ = 0;
  std::string segment_name_;
};

// The path of the running executable (/proc/self/exe), or "" if unreadable.
std::string SelfExecutable();

}  // namespace tierkv
