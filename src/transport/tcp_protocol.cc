#include "transport/tcp_protocol.h"

#include <bit>
#include <cstring>
#include <string>

namespace tierkv::transport {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the TCP transport's wire format is little-endian; big-endian hosts need byte swaps");

template <typename T>
void Put(TcpHeader& out, size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof(value));
}

template <typename T>
T Get(const uint8_t* data, size_t offset) {
  T value;
  std::memcpy(&value, data + offset, sizeof(value));
  return value;
}

Status Invalid(const char* what, const std::string& detail) {
  return Status(ErrorCode::INVALID_PARAMS, std::string("tcp ") + what + ": " + detail);
}

Result<UcxOp> DecodeCommon(const char* what, const uint8_t* bytes) {
  if (std::memcmp(bytes, kTcpMagic, sizeof(kTcpMagic)) != 0) {
    return Invalid(what, "wrong magic (not TKVT)");
  }
  const auto version = Get<uint16_t>(bytes, 4);
  if (version != kTcpProtocolVersion) {
    return Invalid(what, "version " + std::to_string(version) + ", this side speaks " +
                             std::to_string(kTcpProtocolVersion));
  }
  const auto op = Get<uint16_t>(bytes, 6);
  if (op < static_cast<uint16_t>(UcxOp::kHello) || op > static_cast<uint16_t>(UcxOp::kStage)) {
    return Invalid(what, "unknown op " + std::to_string(op));
  }
  if (Get<uint32_t>(bytes, 36) != 0) return Invalid(what, "reserved bytes are not 0");
  return static_cast<UcxOp>(op);
}

TcpHeader Common(UcxOp op, uint64_t id) {
  TcpHeader out{};
  std::memcpy(out.data(), kTcpMagic, sizeof(kTcpMagic));
  Put<uint16_t>(out, 4, kTcpProtocolVersion);
  Put<uint16_t>(out, 6, static_cast<uint16_t>(op));
  Put<uint64_t>(out, 8, id);
  return out;
}

}  // namespace

TcpHeader EncodeTcpRequest(const TcpRequest& request) {
  TcpHeader out = Common(request.op, request.id);
  Put<uint64_t>(out, 16, request.offset);
  Put<uint64_t>(out, 24, request.length);
  Put<uint32_t>(out, 32, request.data_length);
  return out;
}

TcpHeader EncodeTcpReply(const TcpReply& reply) {
  TcpHeader out = Common(reply.op, reply.id);
  Put<int32_t>(out, 16, reply.status);
  Put<uint32_t>(out, 20, reply.aux);
  Put<uint64_t>(out, 24, reply.value);
  Put<uint32_t>(out, 32, reply.data_length);
  return out;
}

Result<TcpRequest> DecodeTcpRequest(const uint8_t* header) {
  Result<UcxOp> op = DecodeCommon("request", header);
  if (!op.ok()) return op.status();
  TcpRequest r;
  r.op = *op;
  r.id = Get<uint64_t>(header, 8);
  r.offset = Get<uint64_t>(header, 16);
  r.length = Get<uint64_t>(header, 24);
  r.data_length = Get<uint32_t>(header, 32);
  const std::string sizes =
      "length " + std::to_string(r.length) + ", data_length " + std::to_string(r.data_length);
  switch (r.op) {
    case UcxOp::kHello:
      if (r.data_length == 0 || r.data_length > kUcxMaxNameLength || r.length != 0 ||
          r.offset != 0) {
        return Invalid("request", "a hello with " + sizes + ", offset " + std::to_string(r.offset) +
                                      " (a name of 1.." + std::to_string(kUcxMaxNameLength) +
                                      " bytes and nothing else)");
      }
      return r;
    case UcxOp::kRead:
    case UcxOp::kWrite:
    case UcxOp::kStage:
      break;
  }
  if (r.length == 0 || r.length > kTcpMaxRequestBytes) {
    return Invalid("request", "a request for " + std::to_string(r.length) + " bytes (1.." +
                                  std::to_string(kTcpMaxRequestBytes) + " allowed)");
  }
  if (r.op == UcxOp::kRead && r.data_length != 0) {
    return Invalid("request", "a read carrying data (" + sizes + ")");
  }
  if (r.op == UcxOp::kWrite && r.data_length != r.length) {
    return Invalid("request", "a write whose data is not its length (" + sizes + ")");
  }
  if (r.op == UcxOp::kStage &&
      (r.data_length <= kUcxStageDescriptorHeader || r.data_length > kTcpMaxDescriptorBytes)) {
    return Invalid("request", "a stage descriptor of " + std::to_string(r.data_length) +
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
  r.id = Get<uint64_t>(header, 8);
  r.status = Get<int32_t>(header, 16);
  r.aux = Get<uint32_t>(header, 20);
  r.value = Get<uint64_t>(header, 24);
  r.data_length = Get<uint32_t>(header, 32);
  const bool carries = r.status == 0 && (r.op == UcxOp::kRead || r.op == UcxOp::kStage);
  if ((carries && (r.data_length != r.value || r.value > kTcpMaxRequestBytes)) ||
      (!carries && r.data_length != 0)) {
    return Invalid("reply", "data_length " + std::to_string(r.data_length) + " with value " +
                                std::to_string(r.value) + " and status " +
                                std::to_string(r.status));
  }
  return r;
}

}  // namespace tierkv::transport
