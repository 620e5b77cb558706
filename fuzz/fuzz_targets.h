// The table of fuzz targets in fuzz/master_rpc_fuzz.cc (see there).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tierkv::fuzz {

struct Target {
  std::string_view name;
  void (*run)(const uint8_t* data, size_t size);
  std::vector<std::string> (*seeds)();  // valid inputs to start a corpus from
};

const std::vector<Target>& Targets();
// Silences logging (the handler logs every registration and mount) so the fuzzer runs fast.
void Quiet();
const Target* FindTarget(std::string_view name);

}  // namespace tierkv::fuzz
