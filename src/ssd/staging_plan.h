// How a staged load is cut to fit an owner's staging buffer (the requester's side of the SSD
// tier): the one rule StagedLoader follows and tierkv::connector::PlanStagedLoad exposes.
//
// Each object needs StagingNeed(size) bytes of staging. With usable = floor(usable_ratio x
// capacity): an object whose need exceeds usable is streamed alone, in pieces of the largest
// value length whose need fits usable ((usable - 8192) rounded down to 4096); the others are
// cut, in order, into parts whose total need fits part_budget (an object whose need alone
// exceeds part_budget, but not usable, gets a part of its own).
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tierkv {

struct StagingStream {
  size_t index = 0;
  uint64_t piece_bytes = 0;  // 0: not even a 4096-byte piece fits (the object cannot be staged)
  uint64_t pieces = 0;
};

struct StagingSplit {
  std::vector<std::vector<size_t>> parts;
  std::vector<StagingStream> streamed;
};

// Largest value length one streamed piece may have within `usable` staging bytes; 0 when not
// even 4096 bytes fit.
uint64_t StreamPieceBytes(uint64_t usable);

// The split of objects of `sizes` (their value bytes); part_budget is capped at usable.
StagingSplit SplitForStaging(const std::vector<uint64_t>& sizes, uint64_t usable,
                             uint64_t part_budget);

}  // namespace tierkv
