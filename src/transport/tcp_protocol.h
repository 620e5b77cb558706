// The frames of the tierkv TCP data transport (protocol "tcp"): a requester (TcpSegmentClient)
// reads and writes byte ranges of a store's segment, and stages ranges of its SSD tier, over one
// TCP connection to the store's data port (TcpSegmentServer). docs/tcp-transport.md is the
// reference. Every frame is a 40-byte header followed by `data_length` bytes of data. The
// server speaks first: a challenge (a reply frame, op 5, id 0) carrying a fresh 32-byte nonce;
// the requester's hello proves the cluster token over it, and the hello's reply proves it back
// (common/cluster_token.h; docs/security.md):
//
//   request  (requester -> server):
//     0  char[4]  magic "TKVT"
//     4  u16      version (2)
//     6  u16      op: 1 hello, 2 read, 3 write, 4 stage
//     8  u64      request id (echoed in the reply)
//     16 u64      offset in the segment (hello: 0; stage: in the object's value)
//     24 u64      length: hello 0; read and stage, the bytes wanted; write, the bytes carried
//     32 u32      data_length: hello, 32 + the segment name's (1..4096): the data is the proof
//                 (HMAC-SHA256 under the token of "tierkv tcp hello", the nonce and the name;
//                 zeros without a token) then the name; read 0; write = length; stage, the
//                 stage descriptor's (src/transport/ucx_protocol.h's layout)
//     36 u32      reserved, 0
//   reply    (server -> requester):
//     0  char[4]  magic "TKVT"
//     4  u16      version (2)
//     6  u16      op of the request answered (5: the challenge)
//     8  u64      request id (challenge: 0)
//     16 i32      status: 0, or the tierkv ErrorCode that refuses the request
//     20 u32      hello: the server's staging capacity in 4 KiB units (0: no SSD tier);
//                 challenge: 1 if the server requires a token, else 0; else 0
//     24 u64      value: hello, the segment's size; read and stage, the bytes in the data;
//                 write, the bytes written (0 on refusal)
//     32 u32      data_length: read and stage with status 0, = value; challenge, 32 (the
//                 nonce); hello with status 0, 32 (the server's proof: HMAC-SHA256 of "tierkv
//                 tcp server", the nonce and the requester's proof) or 0 (a server without a
//                 token); otherwise 0
//     36 u32      reserved, 0
//
// Every field a peer sends is checked here before anything acts on it (DecodeTcpRequest and
// DecodeTcpReply): magic, version, op, reserved bytes, and each op's limits on its lengths, so a
// frame that passes can be acted on without further size checks but the segment's bounds.
// Integers are little-endian. The functions are pure. Thread-safety: all are thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/cluster_token.h"
#include "tierkv/status.h"
#include "transport/ucx_protocol.h"

namespace tierkv::transport {

inline constexpr char kTcpMagic[4] = {'T', 'K', 'V', 'T'};
inline constexpr uint16_t kTcpProtocolVersion = 2;
// The challenge's nonce, and each side's proof, in bytes.
inline constexpr uint32_t kTcpProofBytes = 32;
inline constexpr size_t kTcpHeaderSize = 40;
// The largest read, write or stage one request may ask for (a requester splits larger ranges).
inline constexpr uint64_t kTcpMaxRequestBytes = uint64_t{16} << 20;
// The largest stage descriptor: its header and the longest key.
inline constexpr uint32_t kTcpMaxDescriptorBytes = kUcxStageDescriptorHeader + kUcxMaxNameLength;

// What each side's proof is an HMAC of, with the nonce (and the name, or the requester's proof).
inline constexpr std::string_view kTcpHelloLabel = "tierkv tcp hello";
inline constexpr std::string_view kTcpServerLabel = "tierkv tcp server";
inline std::string_view AsView(const TokenDigest& digest) {
  return {reinterpret_cast<const char*>(digest.data()), digest.size()};
}

struct TcpRequest {
  UcxOp op = UcxOp::kHello;
  uint64_t id = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint32_t data_length = 0;
};

struct TcpReply {
  UcxOp op = UcxOp::kHello;
  uint64_t id = 0;
  int32_t status = 0;  // 0 or an ErrorCode value
  uint32_t aux = 0;    // hello: staging capacity in kUcxStagingUnit bytes
  uint64_t value = 0;
  uint32_t data_length = 0;
};

using TcpHeader = std::array<uint8_t, kTcpHeaderSize>;

TcpHeader EncodeTcpRequest(const TcpRequest& request);
TcpHeader EncodeTcpReply(const TcpReply& reply);

// Decode kTcpHeaderSize bytes. INVALID_PARAMS (the message says which) for a wrong magic, a
// version other than kTcpProtocolVersion, an unknown op, reserved bytes not 0, or lengths the
// op does not allow: a challenge (servers send it, never receive it); hello with data_length
// outside 33..32+4096 or a length or offset; read with
// data; write with data_length != length; read, write and stage with length 0 or over
// kTcpMaxRequestBytes; stage with data_length outside (32, kTcpMaxDescriptorBytes].
Result<TcpRequest> DecodeTcpRequest(const uint8_t* header);
// Same for a reply: INVALID_PARAMS for a wrong magic, version or op, reserved bytes, or a
// data_length that is not `value` (a read or stage with status 0), 32 (a challenge; 0 or 32 for
// a hello with status 0) or 0 (anything else), or over kTcpMaxRequestBytes.
Result<TcpReply> DecodeTcpReply(const uint8_t* header);

}  // namespace tierkv::transport
