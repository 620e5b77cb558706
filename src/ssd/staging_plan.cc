#include "ssd/staging_plan.h"

#include <algorithm>

#include "ssd/staging_area.h"

namespace tierkv {

uint64_t StreamPieceBytes(uint64_t usable) {
  return usable > 8192 + 4096 ? (usable - 8192) & ~uint64_t{4095} : 0;
}

StagingSplit SplitForStaging(const std::vector<uint64_t>& sizes, uint64_t usable,
                             uint64_t part_budget) {
  part_budget = std::min(part_budget, usable);
  StagingSplit split;
  uint64_t used = 0;
  bool open = false;  // whether split.parts.back() still takes objects
  for (size_t i = 0; i < sizes.size(); ++i) {
    const uint64_t need = StagingNeed(sizes[i]);
    if (need > usable) {
      const uint64_t piece = StreamPieceBytes(usable);
      split.streamed.push_back(
          StagingStream{i, piece, piece == 0 ? 0 : (sizes[i] + piece - 1) / piece});
      continue;
    }
    if (!open || used + need > part_budget) {
      split.parts.emplace_back();
      used = 0;
      open = true;
    }
    split.parts.back().push_back(i);
    used += need;
  }
  return split;
}

}  // namespace tierkv
