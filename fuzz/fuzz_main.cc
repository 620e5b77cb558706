// The entry points of one libFuzzer target: kTierkvFuzzName (defined by a one-line source that
// fuzz/CMakeLists.txt generates for each fuzz_<name>) names its entry in the table of
// fuzz/master_rpc_fuzz.cc. This file is compiled once for all the targets.
//
// With TIERKV_FUZZ_WRITE_SEEDS=DIR in the environment, the binary writes the target's seed
// inputs to DIR and exits (scripts/fuzz.sh starts each corpus from them).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_targets.h"

// The target's name, e.g. "req_Exists"; build-fuzz/fuzz/names/<name>.cc defines it.
extern const char kTierkvFuzzName[];

namespace {
const tierkv::fuzz::Target* target = nullptr;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  tierkv::fuzz::Quiet();
  target = tierkv::fuzz::FindTarget(kTierkvFuzzName);
  if (target == nullptr) {
    std::fprintf(stderr, "no fuzz target named %s\n", kTierkvFuzzName);
    std::abort();
  }
  const char* dir = std::getenv("TIERKV_FUZZ_WRITE_SEEDS");
  if (dir == nullptr || *dir == '\0') return 0;
  const std::vector<std::string> seeds = target->seeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    std::ofstream(std::string(dir) + "/seed-" + std::to_string(i), std::ios::binary) << seeds[i];
  }
  std::printf("%s: wrote %zu seed(s) to %s\n", kTierkvFuzzName, seeds.size(), dir);
  std::exit(0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  target->run(data, size);
  return 0;
}
