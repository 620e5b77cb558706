// The smallest complete tierkv program: an embedded store, a batch put from
// scattered buffers, a batch get into other buffers, and a check of the bytes.
// Built and run by ctest (test "example_put_get") so the README stays true.
#include <tierkv/client.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

int main() {
  auto config = tierkv::LoadConfig();  // TIERKV_CONFIG_PATH, else defaults
  if (!config.ok()) {
    std::fprintf(stderr, "config: %s\n", config.status().ToString().c_str());
    return 1;
  }
  config->global_segment_size = 64ull << 20;  // a small pool for the example
  auto client = tierkv::Client::Create(*config);
  if (!client.ok()) {
    std::fprintf(stderr, "create: %s\n", client.status().ToString().c_str());
    return 1;
  }

  // Two objects of 3 pieces each (think: one piece per layer), in one registered buffer.
  constexpr size_t kPiece = 64 * 1024;
  std::vector<char> src(6 * kPiece), dst(6 * kPiece, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<char>(i * 7 + 3);
  if (!(*client)->RegisterBuffer(src.data(), src.size()).ok() ||
      !(*client)->RegisterBuffer(dst.data(), dst.size()).ok()) {
    std::fprintf(stderr, "register_buffer failed\n");
    return 1;
  }
  std::vector<std::string> keys{"model@tp_rank:0@chunk-0", "model@tp_rank:0@chunk-1"};
  auto pieces = [&](std::vector<char>& buf) {
    std::vector<std::vector<void*>> ptrs(2);
    for (size_t obj = 0; obj < 2; ++obj) {
      for (size_t p = 0; p < 3; ++p) ptrs[obj].push_back(buf.data() + (obj * 3 + p) * kPiece);
    }
    return ptrs;
  };
  const std::vector<std::vector<size_t>> sizes(2, std::vector<size_t>(3, kPiece));

  for (int code : (*client)->BatchPutFromMultiBuffers(keys, pieces(src), sizes)) {
    if (code != 0) {
      std::fprintf(stderr, "put failed: %d\n", code);
      return 1;
    }
  }
  for (int64_t got : (*client)->BatchGetIntoMultiBuffers(keys, pieces(dst), sizes)) {
    if (got != static_cast<int64_t>(3 * kPiece)) {
      std::fprintf(stderr, "get failed: %lld\n", static_cast<long long>(got));
      return 1;
    }
  }
  if (std::memcmp(src.data(), dst.data(), src.size()) != 0) {
    std::fprintf(stderr, "bytes differ\n");
    return 1;
  }
  std::printf("put and got back %zu objects of %zu bytes\n", keys.size(), 3 * kPiece);
  return 0;
}
