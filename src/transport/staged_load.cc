#include "transport/staged_load.h"

#include <algorithm>
#include <string>

#include "transport/ucx_protocol.h"

namespace tierkv::transport {

uint64_t MaxStagedRange(double usable_ratio, uint64_t staging_capacity,
                        uint64_t max_request_bytes) {
  const auto usable = static_cast<uint64_t>(usable_ratio * static_cast<double>(staging_capacity));
  if (usable <= 8192 + 4096) return 0;
  return std::min(max_request_bytes, (usable - 8192) & ~uint64_t{4095});
}

Result<std::vector<uint8_t>> StageDescriptorFor(const NetworkSegmentClient::StageOp& op,
                                                std::string_view transport) {
  if (op.key.empty() || op.key.size() > kUcxMaxNameLength) {
    return Status(ErrorCode::INVALID_KEY, std::string(transport) + " staged load: a key of " +
                                              std::to_string(op.key.size()) + " bytes");
  }
  uint64_t total = 0;
  for (const MutPiece& piece : op.dst) total += piece.size;
  if (total != op.location.size) {
    return Status(ErrorCode::INVALID_PARAMS, std::string(transport) + " staged load of " + op.key +
                                                 ": " + std::to_string(total) +
                                                 " bytes of buffer for " +
                                                 std::to_string(op.location.size));
  }
  UcxStageDescriptor d;
  d.region = op.location.region;
  d.generation = op.location.generation;
  d.record_offset = op.location.offset;
  d.object_size = op.location.size;
  d.key = op.key;
  return EncodeUcxStageDescriptor(d);
}

}  // namespace tierkv::transport
