// EtcdProcess: an `etcd` server (Debian's etcd-server) as a child process on 127.0.0.1, for the
// high-availability tests and `tierkv bench failover`.
//
// Start() picks two free ports (client and peer), runs a one-member etcd with its data
// directory under `parent_dir` (the build tree in tests) and its log in that directory, and
// returns once it answers a Range over gRPC. The child gets SIGKILL if the thread that started
// it dies (PR_SET_PDEATHSIG); the destructor kills and reaps it and removes its data directory.
// Thread-safety: none (one owner).
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "common/clock.h"
#include "tierkv/status.h"

namespace tierkv {

struct EtcdProcessOptions {
  std::string binary;            // "" = etcd on PATH (FindEtcd)
  std::string parent_dir = ".";  // the data directory is created inside
  Millis start_timeout{20000};
};

class EtcdProcess {
 public:
  // UNAVAILABLE_IN_CURRENT_MODE when no etcd binary is found (install etcd-server);
  // INTERNAL_ERROR when it cannot be started or does not answer in time.
  static Result<std::unique_ptr<EtcdProcess>> Start(const EtcdProcessOptions& options);
  ~EtcdProcess();
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  // The path of the etcd executable on PATH (or /usr/bin/etcd), "" if none.
  static std::string FindEtcd();

  const std::string& endpoint() const { return endpoint_; }  // 127.0.0.1:port
  std::string address() const { return "etcd://" + endpoint_; }
  const std::string& data_dir() const { return data_dir_; }
  pid_t pid() const { return pid_; }
  // SIGKILL and reap (the data directory stays until destruction). Idempotent.
  void Kill();

 private:
  EtcdProcess() = default;
  pid_t pid_ = -1;
  std::string endpoint_;
  std::string data_dir_;
};

// A TCP port on 127.0.0.1 that was free a moment ago (bound to port 0, then closed).
Result<int> FreeLocalPort();

}  // namespace tierkv
