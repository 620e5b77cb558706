// The handshake of the same-host shared-memory transport: a requester asks a store's
// ShmSegmentServer for its DRAM segment and receives the segment's memfd.
//
// docs/shm-transport.md is the reference; in short, over a Unix stream socket:
//
//   request  (requester -> server), 16 + name_length bytes:
//     0  char[8]  magic "TKVSHM01"
//     8  u32      version (1)
//     12 u32      name_length, 1..4096
//     16 u8[]     segment name (name_length bytes, no terminator)
//   reply    (server -> requester), 32 bytes, the memfd attached (SCM_RIGHTS) when status is 0:
//     0  char[8]  magic "TKVSHM01"
//     8  u32      version (the server's: 1)
//     12 i32      status: 0, or the tierkv ErrorCode that refuses the request
//     16 u64      segment size in bytes (0 on refusal)
//     24 u64      page size of the segment in bytes (0 on refusal)
//
// Integers are in host byte order: both ends run on the same host. After the reply the
// connection stays open and silent; its end (EOF/HUP) tells the requester the segment's owner
// stopped. The functions here are pure: no IO, no allocation beyond the results.
// Thread-safety: all functions are thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::transport {

inline constexpr char kShmMagic[8] = {'T', 'K', 'V', 'S', 'H', 'M', '0', '1'};
inline constexpr uint32_t kShmProtocolVersion = 1;
inline constexpr size_t kShmRequestHeaderSize = 16;
inline constexpr size_t kShmReplySize = 32;
inline constexpr uint32_t kShmMaxNameLength = 4096;
inline constexpr size_t kShmMaxRequestSize = kShmRequestHeaderSize + kShmMaxNameLength;

struct ShmRequest {
  uint32_t version = kShmProtocolVersion;
  std::string segment_name;
};

struct ShmReply {
  uint32_t version = kShmProtocolVersion;
  int32_t status = 0;  // 0 or an ErrorCode value
  uint64_t segment_size = 0;
  uint64_t page_size = 0;
};

// The request for `segment_name`. The caller checks the name's length (1..kShmMaxNameLength).
std::vector<uint8_t> EncodeShmRequest(std::string_view segment_name);

// Checks the first kShmRequestHeaderSize bytes of a request and returns the whole request's
// size (header + name). INVALID_PARAMS for fewer bytes than a header, a wrong magic, a version
// other than kShmProtocolVersion, or a name length of 0 or over kShmMaxNameLength; the message
// says which.
Result<size_t> DecodeShmRequestHeader(const uint8_t* data, size_t size);

// Decodes one complete request, which must be exactly `size` bytes: the header's errors, plus
// INVALID_PARAMS when the bytes are fewer (truncated) or more (trailing bytes) than it announces.
Result<ShmRequest> DecodeShmRequest(const uint8_t* data, size_t size);

// True when the request's header carries the right magic, whatever else is wrong with it: the
// server answers a tierkv peer with an error status, and closes on anything else silently.
bool HasShmMagic(const uint8_t* data, size_t size);

// The fixed-size reply.
std::vector<uint8_t> EncodeShmReply(const ShmReply& reply);

// Decodes exactly kShmReplySize bytes. INVALID_PARAMS for another size or a wrong magic; the
// version and status are returned as sent (the caller judges them).
Result<ShmReply> DecodeShmReply(const uint8_t* data, size_t size);

}  // namespace tierkv::transport
