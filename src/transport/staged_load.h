// What the TCP and UCX segment clients check and send for a staged load (a stage request,
// docs/ucx-transport.md and docs/tcp-transport.md), written once.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "tierkv/status.h"
#include "transport/network_segment.h"

namespace tierkv::transport {

// The largest range one stage request may ask for: its staging need (align_up(length, 4096) +
// 8192) must fit `usable_ratio` of the server's staging buffer, and the length the transport's
// request limit. 0 when not even one 4 KiB range fits.
uint64_t MaxStagedRange(double usable_ratio, uint64_t staging_capacity, uint64_t max_request_bytes);

// The encoded stage descriptor of `op`, or why it is refused before anything is sent:
// INVALID_KEY for an empty key or one over kUcxMaxNameLength bytes, INVALID_PARAMS when the
// destination's pieces do not add up to the object's size. `transport` ("tcp", "ucx") names the
// client in the message.
Result<std::vector<uint8_t>> StageDescriptorFor(const NetworkSegmentClient::StageOp& op,
                                                std::string_view transport);

}  // namespace tierkv::transport
