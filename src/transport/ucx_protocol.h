// The messages of the cross-host transport: a requester (UcxSegmentClient) reads and writes byte
// ranges of a store's segment served by a UcxSegmentServer, over UCX active messages.
//
// docs/ucx-transport.md is the reference; in short, each message is one UCX active message whose
// 32-byte user header is one of these, and whose data is the bytes being moved:
//
//   request  (requester -> server), AM id kUcxRequestAmId, sent with UCP_AM_SEND_FLAG_REPLY:
//     0  char[4]  magic "TKVU"
//     4  u16      version (1)
//     6  u16      op: 1 hello, 2 read, 3 write, 4 stage
//     8  u64      request id (echoed in the reply)
//     16 u64      offset in the segment (hello: 0; stage: in the object's value)
//     24 u64      length: hello, the name's length (the name is the data); read, the bytes wanted
//                 (no data); write, the bytes carried (the data); stage, the bytes wanted (the
//                 data is a stage descriptor, below)
//   reply    (server -> requester), AM id kUcxReplyAmId:
//     0  char[4]  magic "TKVU"
//     4  u16      version (the server's: 1)
//     6  u16      op of the request answered
//     8  u64      request id
//     16 i32      status: 0, or the tierkv ErrorCode that refuses the request
//     20 u32      hello: the server's staging capacity in 4 KiB units (0: no SSD tier); else 0
//     24 u64      value: hello, the segment's size; read and stage, the bytes in the data;
//                 write, the bytes written (0 on refusal)
//
//   stage descriptor (the data of a stage request), 32 + key_length bytes: a range of a record
//   in the server's SSD tier, read through its staging buffer (a staged load):
//     0  u32      region
//     4  u32      key_length, 1..kUcxMaxNameLength
//     8  u64      region generation
//     16 u64      record offset in the region
//     24 u64      object size
//     32 u8[]     key
//
// Integers are little-endian (the hosts may differ; big-endian hosts are not supported). The
// functions here are pure. Thread-safety: all functions are thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "tierkv/status.h"

namespace tierkv::transport {

inline constexpr char kUcxMagic[4] = {'T', 'K', 'V', 'U'};
inline constexpr uint16_t kUcxProtocolVersion = 1;
inline constexpr size_t kUcxHeaderSize = 32;
inline constexpr uint32_t kUcxMaxNameLength = 4096;
// Active message ids: requests are handled on the server's worker, replies on the requester's.
inline constexpr unsigned kUcxRequestAmId = 1;
inline constexpr unsigned kUcxReplyAmId = 2;

enum class UcxOp : uint16_t {
  kHello = 1,
  kRead = 2,
  kWrite = 3,
  kStage = 4,
  kChallenge = 5,  // the TCP transport only: the server's first frame (tcp_protocol.h)
};

struct UcxRequest {
  uint16_t version = kUcxProtocolVersion;
  UcxOp op = UcxOp::kHello;
  uint64_t id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

struct UcxReply {
  uint16_t version = kUcxProtocolVersion;
  UcxOp op = UcxOp::kHello;
  uint64_t id = 0;
  int32_t status = 0;  // 0 or an ErrorCode value
  uint32_t aux = 0;    // hello: staging capacity in kUcxStagingUnit bytes
  uint64_t value = 0;
};

inline constexpr uint64_t kUcxStagingUnit = 4096;
inline constexpr size_t kUcxStageDescriptorHeader = 32;

// What a stage request names: bytes [request offset, + length) of the value of the record of
// `key` at `location` (DiskLocation's fields).
struct UcxStageDescriptor {
  uint32_t region = 0;
  uint64_t generation = 0;
  uint64_t record_offset = 0;
  uint64_t object_size = 0;
  std::string key;
};

using UcxHeader = std::array<uint8_t, kUcxHeaderSize>;

UcxHeader EncodeUcxRequest(const UcxRequest& request);
UcxHeader EncodeUcxReply(const UcxReply& reply);

// Decode exactly kUcxHeaderSize bytes. INVALID_PARAMS for another size, a wrong magic, a version
// other than kUcxProtocolVersion, or an unknown op; the message says which. Lengths and offsets
// are returned as sent: the caller judges them against the segment and the data.
Result<UcxRequest> DecodeUcxRequest(const void* data, size_t size);
Result<UcxReply> DecodeUcxReply(const void* data, size_t size);

std::vector<uint8_t> EncodeUcxStageDescriptor(const UcxStageDescriptor& descriptor);
// Decodes exactly `size` bytes. INVALID_PARAMS for fewer than the header, a key length of 0 or
// over kUcxMaxNameLength, or a size other than header + key length; the message says which.
Result<UcxStageDescriptor> DecodeUcxStageDescriptor(const void* data, size_t size);

}  // namespace tierkv::transport
