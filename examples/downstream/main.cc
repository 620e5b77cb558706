// A downstream program: puts and gets a few objects through the public API only
// (<tierkv/...>); exits 0 when every byte came back.
#include <tierkv/client.h>
#include <tierkv/config.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

int main() {
  tierkv::Config config;  // embedded: an in-process master and a segment of this process
  config.global_segment_size = 64ull << 20;
  auto client = tierkv::Client::Create(config);
  if (!client.ok()) {
    std::fprintf(stderr, "downstream: %s\n", client.status().ToString().c_str());
    return 1;
  }
  std::vector<char> in(1 << 20), out(1 << 20);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<char>(i * 7 + 3);
  for (int k = 0; k < 4; ++k) {
    const std::string key = "downstream-" + std::to_string(k);
    if (int rc = (*client)->Put(key, in.data(), in.size()); rc != 0) {
      std::fprintf(stderr, "downstream: put %s: %d\n", key.c_str(), rc);
      return 1;
    }
    const int64_t got = (*client)->Get(key, out.data(), out.size());
    if (got != static_cast<int64_t>(in.size()) || std::memcmp(in.data(), out.data(), in.size())) {
      std::fprintf(stderr, "downstream: get %s: %lld\n", key.c_str(), static_cast<long long>(got));
      return 1;
    }
  }
  // A remote master is refused cleanly by tierkv::embedded, taken by tierkv::tierkv (nothing
  // listens on port 1: RPC_FAIL after the connect timeout would be slow, so only the embedded
  // build tries).
#ifdef TIERKV_DOWNSTREAM_TRY_REMOTE
  tierkv::Config remote = config;
  remote.master_server_address = "127.0.0.1:1";
  auto refused = tierkv::Client::Create(remote);
  if (refused.ok() || refused.code() != tierkv::ErrorCode::UNAVAILABLE_IN_CURRENT_MODE) {
    std::fprintf(stderr, "downstream: a remote master should be refused by tierkv::embedded\n");
    return 1;
  }
#endif
  std::printf("downstream: 4 objects round-tripped through tierkv\n");
  return 0;
}
