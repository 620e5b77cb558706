#include "store/local_tier_mover.h"

namespace tierkv {

std::vector<Result<DiskLocation>> LocalTierMover::Demote(const std::vector<DemoteItem>& items) {
  requests_.fetch_add(1, std::memory_order_relaxed);
  std::vector<Result<DiskLocation>> out;
  out.reserve(items.size());
  for (const auto& item : items) {
    if (item.offset > segment_->size() || item.size > segment_->size() - item.offset) {
      out.emplace_back(ErrorCode::INVALID_PARAMS,
                       "demote of " + item.key + ": range outside segment");
      continue;
    }
    // The checksum recorded at PutEnd: not recomputed, so the record never vouches for bytes
    // that changed in memory since the put.
    out.push_back(tier_->Append(item.key, {ConstPiece{segment_->base() + item.offset, item.size}},
                                item.checksum));
  }
  return out;
}

}  // namespace tierkv
