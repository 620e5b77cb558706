// DistributedStore's dummy-client mode (Mooncake's setup_dummy / alloc_from_mem_pool): an engine
// process that owns no segment attaches to a `tierkv store` on its host. Mooncake forwards every
// call of a dummy client to its "real client" over RPC and the real client moves bytes into the
// dummy's shared memory; here the dummy is a requester of the store's own master and reads the
// store's segment over shared memory itself — the same one copy, without the forwarding hop.
// How the store is found: its metrics server's /client_info page (tools/store_command.cc).
#include <netdb.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>

#include "common/host_name.h"
#include "common/unique_fd.h"
#include "connector/distributed_store_internal.h"

namespace tierkv {

using dstore::Code;
using dstore::kOk;

namespace {

constexpr int kAttachTimeoutMs = 5000;

// GET http://host:port/path with HTTP/1.0 (the server closes after the answer): the body of a
// 200 answer.
Result<std::string> HttpGetBody(const std::string& address, const std::string& path) {
  const HostAndPort hp = SplitLocalHostname(address);
  if (hp.host.empty() || hp.port <= 0) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "setup_dummy: server_address '" + address + "' is not HOST:PORT");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(hp.port);
  if (int rc = getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &found); rc != 0) {
    return Status(ErrorCode::RPC_FAIL,
                  "setup_dummy: cannot resolve '" + hp.host + "': " + gai_strerror(rc));
  }
  UniqueFd fd;
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    UniqueFd s(socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) continue;
    timeval tv{kAttachTimeoutMs / 1000, 0};
    setsockopt(s.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(s.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(s.get(), a->ai_addr, a->ai_addrlen) == 0) {
      fd = std::move(s);
      break;
    }
    why = std::strerror(errno);
  }
  freeaddrinfo(found);
  if (!fd.valid()) {
    return Status(ErrorCode::RPC_FAIL, "setup_dummy: no tierkv store answers at " + address + " (" +
                                           why +
                                           "): start one with `tierkv store --master M "
                                           "--metrics-port PORT`");
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: " + address + "\r\n\r\n";
  if (send(fd.get(), request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return Status(ErrorCode::RPC_FAIL, "setup_dummy: sending to " + address + " failed");
  }
  std::string answer;
  char chunk[4096];
  for (;;) {
    const ssize_t n = recv(fd.get(), chunk, sizeof(chunk), 0);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status(ErrorCode::RPC_FAIL,
                    "setup_dummy: reading from " + address + ": " + std::strerror(errno));
    }
    answer.append(chunk, static_cast<size_t>(n));
    if (answer.size() > (1u << 20)) break;  // a page this size is not a store's
  }
  const size_t head_end = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.", 0) != 0 || head_end == std::string::npos || answer.size() < 12 ||
      answer.compare(9, 3, "200") != 0) {
    return Status(ErrorCode::RPC_FAIL, "setup_dummy: " + address + path +
                                           " did not answer 200: is it a tierkv store's "
                                           "metrics address?");
  }
  return answer.substr(head_end + 4);
}

}  // namespace

int DistributedStore::SetupDummy(uint64_t mem_pool_size, uint64_t local_buffer_size,
                                 const std::string& store_address) {
  auto body = HttpGetBody(store_address, "/client_info");
  if (!body.ok()) {
    SetError(body.status().message());
    return Code(body.code());
  }
  nlohmann::json info = nlohmann::json::parse(*body, nullptr, /*allow_exceptions=*/false);
  if (info.is_discarded() || !info.is_object() || !info.contains("master") ||
      !info["master"].is_string() || info["master"].get<std::string>().empty()) {
    SetError("setup_dummy: " + store_address +
             "/client_info is not a tierkv store's (no master address in it)");
    return Code(ErrorCode::RPC_FAIL);
  }
  StoreSetupOptions o;
  o.local_hostname = "";  // this host's name: the dummy contributes no segment to name
  o.global_segment_size = 0;
  o.local_buffer_size = local_buffer_size;
  o.master_server_addr = info["master"].get<std::string>();
  // The store is on this host: its segment over shared memory ("auto"), other hosts' segments
  // over TCP — or everything over RDMA when the store serves RDMA.
  o.protocol = "auto";
  if (info.contains("protocol") && info["protocol"].is_string() &&
      info["protocol"].get<std::string>() == "rdma") {
    o.protocol = "rdma";
  }
  if (const int rc = Setup(o); rc != 0) return rc;
  {
    std::lock_guard lock(pool_mu_);
    pool_limit_ = mem_pool_size;
  }
  spdlog::info("DistributedStore: dummy client of the store at {} (segment {}, master {})",
               store_address, info.value("segment", std::string("?")), o.master_server_addr);
  return kOk;
}

uintptr_t DistributedStore::AllocFromMemPool(uint64_t size) {
  if (size == 0) {
    SetError("alloc_from_mem_pool: size 0");
    return 0;
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (size > UINT64_MAX - page) {
    SetError("alloc_from_mem_pool: size too large");
    return 0;
  }
  const uint64_t rounded = (size + page - 1) / page * page;
  std::lock_guard lock(pool_mu_);
  if (pool_limit_ != 0 && rounded > pool_limit_ - std::min(pool_limit_, pool_used_)) {
    SetError("alloc_from_mem_pool: " + std::to_string(size) + " bytes would pass the pool's " +
             std::to_string(pool_limit_) + " (mem_pool_size; " + std::to_string(pool_used_) +
             " handed out)");
    return 0;
  }
  void* p = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    SetError("alloc_from_mem_pool: mmap of " + std::to_string(rounded) +
             " bytes: " + std::strerror(errno));
    return 0;
  }
  pool_.emplace_back(p, rounded);
  pool_used_ += rounded;
  return reinterpret_cast<uintptr_t>(p);
}

}  // namespace tierkv
