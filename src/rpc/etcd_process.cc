#include "rpc/etcd_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "common/errno_text.h"
#include "rpc/etcd_client.h"

namespace tierkv {
namespace {}  // namespace

Result<int> FreeLocalPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoStatus("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const Status st = ErrnoStatus("bind 127.0.0.1:0");
    close(fd);
    return st;
  }
  close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

std::string EtcdProcess::FindEtcd() {
  if (const char* path = std::getenv("PATH")) {
    std::string all(path);
    size_t from = 0;
    while (from <= all.size()) {
      size_t to = all.find(':', from);
      if (to == std::string::npos) to = all.size();
      const std::string candidate = all.substr(from, to - from) + "/etcd";
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
      from = to + 1;
    }
  }
  return access("/usr/bin/etcd", X_OK) == 0 ? "/usr/bin/etcd" : "";
}

Result<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(const EtcdProcessOptions& options) {
  const std::string binary = options.binary.empty() ? FindEtcd() : options.binary;
  if (binary.empty()) {
    return Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                  "no etcd binary on PATH (Debian: apt-get install etcd-server)");
  }
  auto client_port = FreeLocalPort();
  if (!client_port.ok()) return client_port.status();
  auto peer_port = FreeLocalPort();
  if (!peer_port.ok()) return peer_port.status();
  static std::atomic<int> counter{0};
  std::error_code ec;
  const std::filesystem::path dir =
      std::filesystem::absolute(options.parent_dir, ec) /
      ("etcd-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec)
    return Status(ErrorCode::INTERNAL_ERROR, "creating " + dir.string() + ": " + ec.message());
  const std::string client = "http://127.0.0.1:" + std::to_string(*client_port);
  const std::string peer = "http://127.0.0.1:" + std::to_string(*peer_port);
  std::vector<std::string> args = {binary,
                                   "--name",
                                   "tierkv-test",
                                   "--data-dir",
                                   (dir / "data").string(),
                                   "--listen-client-urls",
                                   client,
                                   "--advertise-client-urls",
                                   client,
                                   "--listen-peer-urls",
                                   peer,
                                   "--initial-advertise-peer-urls",
                                   peer,
                                   "--initial-cluster",
                                   "tierkv-test=" + peer,
                                   "--initial-cluster-state",
                                   "new"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string log = (dir / "etcd.log").string();
  const int log_fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log_fd < 0) return ErrnoStatus("open " + log);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    const Status st = ErrnoStatus("fork");
    close(log_fd);
    return st;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    execv(argv[0], argv.data());
    _exit(127);
  }
  close(log_fd);
  std::unique_ptr<EtcdProcess> etcd(new EtcdProcess());
  etcd->pid_ = pid;
  etcd->endpoint_ = "127.0.0.1:" + std::to_string(*client_port);
  etcd->data_dir_ = dir.string();
  auto client_api = EtcdClient::Create({etcd->endpoint_}, Millis(500));
  if (!client_api.ok()) return client_api.status();
  const auto deadline = std::chrono::steady_clock::now() + options.start_timeout;
  Status last;
  while (std::chrono::steady_clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      etcd->pid_ = -1;
      return Status(ErrorCode::INTERNAL_ERROR, "etcd exited at start (see " + log + ")");
    }
    auto got = (*client_api)->Get("/tierkv/ready-check");
    if (got.ok()) return etcd;
    last = got.status();
    std::this_thread::sleep_for(Millis(50));
  }
  return Status(ErrorCode::INTERNAL_ERROR, "etcd did not answer within " +
                                               std::to_string(options.start_timeout.count()) +
                                               " ms (see " + log + "): " + last.message());
}

void EtcdProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

EtcdProcess::~EtcdProcess() {
  Kill();
  std::error_code ec;
  if (!data_dir_.empty()) std::filesystem::remove_all(data_dir_, ec);
}

}  // namespace tierkv
