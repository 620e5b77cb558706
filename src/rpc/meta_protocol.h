// The master's metadata channel: the data path's batch calls (PutStart, PutEnd, PutRevoke,
// Exists, GetReplicas, Remove) as length-prefixed frames over one TCP connection each, beside
// gRPC. The messages are master.proto's, the same as over gRPC; only the framing differs. Why:
// a gRPC unary call costs ~100 µs here against ~30 µs for a socket round trip
// (docs/benchmarks.md), and a batch of small objects makes one or two of them.
// docs/wire-format.md is the reference; in short (integers little-endian):
//
//   challenge (server -> client, first, 48 bytes):
//     0  char[4]  magic "TKVM"
//     4  u16      version (1)
//     6  u16      flags: bit 0 = the master requires the cluster token
//     8  u32      idle timeout in ms: the server closes a connection silent this long
//     12 u32      reserved, 0
//     16 u8[32]   nonce
//   hello (client -> server, 40 bytes):
//     0  char[4]  magic, 4 u16 version, 6 u16 reserved 0
//     8  u8[32]   proof: HMAC-SHA256 under the token of "tierkv meta hello" and the nonce;
//                 zeros without a token
//   welcome (server -> client, 48 bytes):
//     0  char[4]  magic, 4 u16 version, 6 u16 reserved 0
//     8  i32      status: 0, or the ErrorCode that refuses the connection (then it closes)
//     12 u32      reserved, 0
//     16 u8[32]   the server's proof: HMAC-SHA256 of "tierkv meta server", the nonce and the
//                 client's proof, under the token it matched (zeros without a token)
//   call (client -> server): 8-byte header, then `length` bytes of the request message
//     0  u32      length (<= kMetaMaxMessageBytes)
//     4  u16      method (MetaMethod)
//     6  u16      reserved, 0
//   answer (server -> client): 12-byte header, then `length` bytes
//     0  u32      length
//     4  u16      method of the call answered
//     6  u16      reserved, 0
//     8  i32      status: 0 = the bytes are the response message; else the ErrorCode that
//                 refused the call (malformed, unknown method, not permitted) and the bytes
//                 say why (text)
//
// One call at a time per connection: a client keeps a pool of connections. Every field is
// checked by the decoders before anything acts on it. Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "common/cluster_token.h"
#include "tierkv/status.h"

namespace tierkv {

inline constexpr char kMetaMagic[4] = {'T', 'K', 'V', 'M'};
inline constexpr uint16_t kMetaProtocolVersion = 1;
inline constexpr size_t kMetaChallengeSize = 48;
inline constexpr size_t kMetaHelloSize = 40;
inline constexpr size_t kMetaWelcomeSize = 48;
inline constexpr size_t kMetaCallHeaderSize = 8;
inline constexpr size_t kMetaAnswerHeaderSize = 12;
// The same limit as gRPC's messages to and from the master (checked in meta_protocol.cc).
inline constexpr uint32_t kMetaMaxMessageBytes = uint32_t{64} << 20;
inline constexpr std::string_view kMetaHelloLabel = "tierkv meta hello";
inline constexpr std::string_view kMetaServerLabel = "tierkv meta server";

// The calls the channel carries; the numbers are the wire's.
enum class MetaMethod : uint16_t {
  kPutStart = 1,
  kPutEnd = 2,
  kPutRevoke = 3,
  kExists = 4,
  kGetReplicas = 5,
  kRemove = 6,
};
inline constexpr uint16_t kMetaMaxMethod = 6;
const char* MetaMethodName(MetaMethod method);

// A frame's or digest's bytes, to send.
template <size_t N>
std::string_view View(const std::array<uint8_t, N>& bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), N};
}

struct MetaChallenge {
  bool token_required = false;
  uint32_t idle_timeout_ms = 0;
  TokenDigest nonce{};
};
struct MetaWelcome {
  int32_t status = 0;
  TokenDigest proof{};
};
struct MetaCallHeader {
  uint32_t length = 0;
  MetaMethod method = MetaMethod::kPutStart;
};
struct MetaAnswerHeader {
  uint32_t length = 0;
  uint16_t method = 0;
  int32_t status = 0;
};

using MetaChallengeBytes = std::array<uint8_t, kMetaChallengeSize>;
using MetaHelloBytes = std::array<uint8_t, kMetaHelloSize>;
using MetaWelcomeBytes = std::array<uint8_t, kMetaWelcomeSize>;
using MetaCallHeaderBytes = std::array<uint8_t, kMetaCallHeaderSize>;
using MetaAnswerHeaderBytes = std::array<uint8_t, kMetaAnswerHeaderSize>;

MetaChallengeBytes EncodeMetaChallenge(const MetaChallenge& challenge);
MetaHelloBytes EncodeMetaHello(const TokenDigest& proof);
MetaWelcomeBytes EncodeMetaWelcome(const MetaWelcome& welcome);
MetaCallHeaderBytes EncodeMetaCallHeader(const MetaCallHeader& header);
MetaAnswerHeaderBytes EncodeMetaAnswerHeader(const MetaAnswerHeader& header);

// Each decoder: INVALID_PARAMS naming the field that is wrong (magic, version, reserved bytes,
// a length over kMetaMaxMessageBytes, an unknown method).
Result<MetaChallenge> DecodeMetaChallenge(const MetaChallengeBytes& bytes);
Result<TokenDigest> DecodeMetaHello(const MetaHelloBytes& bytes);
Result<MetaWelcome> DecodeMetaWelcome(const MetaWelcomeBytes& bytes);
Result<MetaCallHeader> DecodeMetaCallHeader(const MetaCallHeaderBytes& bytes);
Result<MetaAnswerHeader> DecodeMetaAnswerHeader(const MetaAnswerHeaderBytes& bytes);

}  // namespace tierkv
