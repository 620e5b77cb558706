#include "transport/tcp_protocol.h"

#include <bit>
#include <cstring>
#include <string>

#include "common/byte_io.h"

namespace tierkv::transport {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the TCP transport's wire format is little-endian; big-endian hosts need byte swaps");

Status TcpInvalid(const char* what, const std::string& detail) {
  return Status(ErrorCode::INVALID_PARAMS, std::string("tcp ") + what + ": " + detail);
}

Result<UcxOp> DecodeCommon(const char* what, const uint8_t* bytes) {
  if (std::memcmp(bytes, kTcpMagic, sizeof(kTcpMagic)) != 0) {
    return TcpInvalid(what, "wrong magic (not TKVT)");
  }
  const auto version = LoadAt<uint16_t>(bytes, 4);
  if (version != kTcpProtocolVersion) {
    return TcpInvalid(what, "version " + std::to_string(version) + ", this side speaks " +
                                std::to_string(kTcpProtocolVersion));
  }
  const auto op = LoadAt<uint16_t>(bytes, 6);
  if (op < static_cast<uint16_t>(UcxOp::kHello) || op > static_cast<uint16_t>(UcxOp::kChallenge)) {
    return TcpInvalid(what, "unknown op " + std::to_string(op));
  }
  if (LoadAt<uint32_t>(bytes, 36) != 0) return TcpInvalid(what, "reserved bytes are not 0");
  return static_cast<UcxOp>(op);
}

TcpHeader Common(UcxOp op, uint64_t id) {
  TcpHeader out{};
  std::memcpy(out.data(), kTcpMagic, sizeof(kTcpMagic));
  StoreAt<uint16_t>(out.data(), 4, kTcpProtocolVersion);
  StoreAt<uint16_t>(out.data(), 6, static_cast<uint16_t>(op));
  StoreAt<uint64_t>(out.data(), 8, id);
  return out;
}

}  // namespace

TcpHeader EncodeTcpRequest(const TcpRequest& request) {
  TcpHeader out = Common(request.op, request.id);
  StoreAt<uint64_t>(out.data(), 16, request.offset);
  StoreAt<uint64_t>(out.data(), 24, request.length);
  StoreAt<uint32_t>(out.data(), 32, request.data_length);
  return out;
}

TcpHeader EncodeTcpReply(const TcpReply& reply) {
  TcpHeader out = Common(reply.op, reply.id);
  StoreAt<int32_t>(out.data(), 16, reply.status);
  StoreAt<uint32_t>(out.data(), 20, reply.aux);
  StoreAt<uint64_t>(out.data(), 24, reply.value);
  StoreAt<uint32_t>(out.data(), 32, reply.data_length);
  return out;
}

Result<TcpRequest> DecodeTcpRequest(const uint8_t* header) {
  Result<UcxOp> op = DecodeCommon("request", header);
  if (!op.ok()) return op.status();
  TcpRequest r;
  r.op = *op;
  r.id = LoadAt<uint64_t>(header, 8);
  r.offset = LoadAt<uint64_t>(header, 16);
  r.length = LoadAt<uint64_t>(header, 24);
  r.data_length = LoadAt<uint32_t>(header, 32);
  const std::string sizes =
      "length " + std::to_string(r.length) + ", data_length " + std::to_string(r.data_length);
  switch (r.op) {
    case UcxOp::kChallenge:
      return TcpInvalid("request", "a challenge (only servers send one)");
    case UcxOp::kHello:
      if (r.data_length <= kTcpProofBytes || r.data_length > kTcpProofBytes + kUcxMaxNameLength ||
          r.length != 0 || r.offset != 0) {
        return TcpInvalid("request", "a hello with " + sizes + ", offset " +
                                         std::to_string(r.offset) + " (a proof of " +
                                         std::to_string(kTcpProofBytes) + " bytes, a name of 1.." +
                                         std::to_string(kUcxMaxNameLength) +
                                         " bytes and nothing else)");
      }
      return r;
    case UcxOp::kRead:
    case UcxOp::kWrite:
    case UcxOp::kStage:
      break;
  }
  if (r.length == 0 || r.length > kTcpMaxRequestBytes) {
    return TcpInvalid("request", "a request for " + std::to_string(r.length) + " bytes (1.." +
                                     std::to_string(kTcpMaxRequestBytes) + " allowed)");
  }
  if (r.op == UcxOp::kRead && r.data_length != 0) {
    return TcpInvalid("request", "a read carrying data (" + sizes + ")");
  }
  if (r.op == UcxOp::kWrite && r.data_length != r.length) {
    return TcpInvalid("request", "a write whose data is not its length (" + sizes + ")");
  }
  if (r.op == UcxOp::kStage &&
      (r.data_length <= kUcxStageDescriptorHeader || r.data_length > kTcpMaxDescriptorBytes)) {
    return TcpInvalid("request", "a stage descriptor of " + std::to_string(r.data_length) +
                                     " bytes (" + std::to_string(kUcxStageDescriptorHeader + 1) +
                                     ".." + std::to_string(kTcpMaxDescriptorBytes) + " allowed)");
  }
  return r;
}

Result<TcpReply> DecodeTcpReply(const uint8_t* header) {
  Result<UcxOp> op = DecodeCommon("reply", header);
  if (!op.ok()) return op.status();
  TcpReply r;
  r.op = *op;
  r.id = LoadAt<uint64_t>(header, 8);
  r.status = LoadAt<int32_t>(header, 16);
  r.aux = LoadAt<uint32_t>(header, 20);
  r.value = LoadAt<uint64_t>(header, 24);
  r.data_length = LoadAt<uint32_t>(header, 32);
  const bool carries = r.status == 0 && (r.op == UcxOp::kRead || r.op == UcxOp::kStage);
  const bool proof = r.op == UcxOp::kChallenge || (r.op == UcxOp::kHello && r.status == 0);
  const bool proof_ok =
      r.data_length == kTcpProofBytes || (r.op == UcxOp::kHello && r.data_length == 0);
  if ((carries && (r.data_length != r.value || r.value > kTcpMaxRequestBytes)) ||
      (proof && !proof_ok) || (!carries && !proof && r.data_length != 0)) {
    return TcpInvalid("reply", "data_length " + std::to_string(r.data_length) + " with value " +
                                   std::to_string(r.value) + " and status " +
                                   std::to_string(r.status));
  }
  return r;
}

}  // namespace tierkv::transport
