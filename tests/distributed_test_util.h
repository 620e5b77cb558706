// Shared helpers of the multi-process tests of the distributed data path: a real `tierkv
// master` and `tierkv store` processes (TIERKV_BINARY) on 127.0.0.1 with free ports, and
// requesters in this process. Every process is owned by a MasterProcess, whose destructor kills
// and reaps it.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "pattern_test_util.h"
#include "rpc/master_process.h"
#include "tierkv/client.h"
#include "tierkv/config.h"
#include "tierkv/status.h"

#ifndef TIERKV_BINARY
#error "TIERKV_BINARY (the tierkv executable) must be defined by the build"
#endif

namespace tierkv::dist_test {

using test_util::Pattern;

using SteadyClock = std::chrono::steady_clock;

// The tierkv binary under test: TIERKV_TEST_BINARY when set (another build's), else this build's.
inline std::string TestBinary() {
  const char* other = std::getenv("TIERKV_TEST_BINARY");
  return other != nullptr && other[0] != '\0' ? std::string(other) : std::string(TIERKV_BINARY);
}
inline constexpr size_t kObject = 256 * 1024;

// `metrics`: serve /metrics on a free port (metrics_port() says which); else none.
inline std::unique_ptr<MasterProcess> StartMaster(std::vector<std::string> extra = {}, int port = 0,
                                                  bool metrics = false) {
  MasterProcessOptions options;
  options.binary = TIERKV_BINARY;
  options.args = {"--host",         "127.0.0.1",         "--port", std::to_string(port),
                  "--metrics-port", metrics ? "0" : "-1"};
  options.args.insert(options.args.end(), extra.begin(), extra.end());
  options.expect_metrics = metrics;
  auto started = MasterProcess::Start(options);
  EXPECT_TRUE(started.ok()) << started.status().ToString();
  return started.ok() ? std::move(started).value() : nullptr;
}

// `extra`: more flags (e.g. {"--config", path}).
inline std::unique_ptr<MasterProcess> StartStore(const MasterProcess& master,
                                                 const std::string& size = "32MiB",
                                                 bool metrics = false,
                                                 std::vector<std::string> extra = {}) {
  MasterProcessOptions options;
  options.binary = TIERKV_BINARY;
  options.command = "store";
  options.args = {"--master",      master.address(), "--segment-size",    size,
                  "--small-pages", "--metrics-port", metrics ? "0" : "-1"};
  options.args.insert(options.args.end(), extra.begin(), extra.end());
  options.expect_metrics = metrics;
  auto started = MasterProcess::Start(options);
  EXPECT_TRUE(started.ok()) << started.status().ToString();
  return started.ok() ? std::move(started).value() : nullptr;
}

// A master and two stores (32 MiB each by default).
struct Cluster {
  std::unique_ptr<MasterProcess> master, store_a, store_b;
  bool ok() const { return master && store_a && store_b; }
};

inline Cluster StartCluster(std::vector<std::string> master_args = {},
                            const std::string& store_size = "32MiB") {
  Cluster c;
  c.master = StartMaster(std::move(master_args));
  if (c.master == nullptr) return c;
  c.store_a = StartStore(*c.master, store_size);
  c.store_b = StartStore(*c.master, store_size);
  return c;
}

inline Config RequesterConfig(const MasterProcess& master, const std::string& protocol = "shm") {
  Config c;
  c.mode = Mode::kStandaloneStore;
  c.global_segment_size = 0;
  c.master_server_address = master.address();
  c.protocol = protocol;
  c.require_registered_buffers = false;
  return c;
}

inline std::unique_ptr<Client> Requester(const Config& c) {
  auto client = Client::Create(c);
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? std::move(client).value() : nullptr;
}

inline int PutKey(Client& c, const std::string& key, int seed, const ReplicateConfig& rc = {}) {
  const std::string v = Pattern(kObject, seed);
  return c.Put(key, v.data(), v.size(), rc);
}

// The value's size if byte-exact, else the get's (negative) code, or -1000 for wrong bytes.
inline int64_t GetKey(Client& c, const std::string& key, int seed) {
  std::string buf(kObject, '\0');
  const int64_t n = c.Get(key, buf.data(), buf.size());
  if (n < 0) return n;
  return buf == Pattern(kObject, seed) ? n : -1000;
}

// Until `pred` holds or `timeout` passes.
inline bool Eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  while (SteadyClock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

}  // namespace tierkv::dist_test
