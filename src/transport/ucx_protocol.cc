#include "transport/ucx_protocol.h"

#include <bit>
#include <cstring>
#include <string>

#include "common/byte_io.h"

namespace tierkv::transport {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the UCX transport's wire format is little-endian; big-endian hosts need byte swaps");

Status UcxInvalid(const char* what, const std::string& detail) {
  return Status(ErrorCode::INVALID_PARAMS, std::string("ucx ") + what + ": " + detail);
}

// Checks the size, magic and version shared by both headers and reads the op.
Result<UcxOp> DecodeCommon(const char* what, const void* data, size_t size) {
  if (size != kUcxHeaderSize) {
    return UcxInvalid(what, "header of " + std::to_string(size) + " bytes, expected " +
                                std::to_string(kUcxHeaderSize));
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  if (std::memcmp(bytes, kUcxMagic, sizeof(kUcxMagic)) != 0) {
    return UcxInvalid(what, "wrong magic (not TKVU)");
  }
  const auto version = LoadAt<uint16_t>(bytes, 4);
  if (version != kUcxProtocolVersion) {
    return UcxInvalid(what, "version " + std::to_string(version) + ", this side speaks " +
                                std::to_string(kUcxProtocolVersion));
  }
  const auto op = LoadAt<uint16_t>(bytes, 6);
  if (op < static_cast<uint16_t>(UcxOp::kHello) || op > static_cast<uint16_t>(UcxOp::kStage))
    return UcxInvalid(what, "unknown op " + std::to_string(op));
  return static_cast<UcxOp>(op);
}

UcxHeader Common(uint16_t version, UcxOp op, uint64_t id) {
  UcxHeader out{};
  std::memcpy(out.data(), kUcxMagic, sizeof(kUcxMagic));
  StoreAt<uint16_t>(out.data(), 4, version);
  StoreAt<uint16_t>(out.data(), 6, static_cast<uint16_t>(op));
  StoreAt<uint64_t>(out.data(), 8, id);
  return out;
}

}  // namespace

UcxHeader EncodeUcxRequest(const UcxRequest& request) {
  UcxHeader out = Common(request.version, request.op, request.id);
  StoreAt<uint64_t>(out.data(), 16, request.offset);
  StoreAt<uint64_t>(out.data(), 24, request.length);
  return out;
}

UcxHeader EncodeUcxReply(const UcxReply& reply) {
  UcxHeader out = Common(reply.version, reply.op, reply.id);
  StoreAt<int32_t>(out.data(), 16, reply.status);
  StoreAt<uint32_t>(out.data(), 20, reply.aux);
  StoreAt<uint64_t>(out.data(), 24, reply.value);
  return out;
}

Result<UcxRequest> DecodeUcxRequest(const void* data, size_t size) {
  Result<UcxOp> op = DecodeCommon("request", data, size);
  if (!op.ok()) return op.status();
  const auto* bytes = static_cast<const uint8_t*>(data);
  UcxRequest request;
  request.version = LoadAt<uint16_t>(bytes, 4);
  request.op = *op;
  request.id = LoadAt<uint64_t>(bytes, 8);
  request.offset = LoadAt<uint64_t>(bytes, 16);
  request.length = LoadAt<uint64_t>(bytes, 24);
  return request;
}

Result<UcxReply> DecodeUcxReply(const void* data, size_t size) {
  Result<UcxOp> op = DecodeCommon("reply", data, size);
  if (!op.ok()) return op.status();
  const auto* bytes = static_cast<const uint8_t*>(data);
  UcxReply reply;
  reply.version = LoadAt<uint16_t>(bytes, 4);
  reply.op = *op;
  reply.id = LoadAt<uint64_t>(bytes, 8);
  reply.status = LoadAt<int32_t>(bytes, 16);
  reply.aux = LoadAt<uint32_t>(bytes, 20);
  reply.value = LoadAt<uint64_t>(bytes, 24);
  return reply;
}

std::vector<uint8_t> EncodeUcxStageDescriptor(const UcxStageDescriptor& d) {
  std::vector<uint8_t> out(kUcxStageDescriptorHeader + d.key.size());
  const auto put = [&out](size_t offset, auto value) {
    std::memcpy(out.data() + offset, &value, sizeof(value));
  };
  put(0, d.region);
  put(4, static_cast<uint32_t>(d.key.size()));
  put(8, d.generation);
  put(16, d.record_offset);
  put(24, d.object_size);
  std::memcpy(out.data() + kUcxStageDescriptorHeader, d.key.data(), d.key.size());
  return out;
}

Result<UcxStageDescriptor> DecodeUcxStageDescriptor(const void* data, size_t size) {
  if (size < kUcxStageDescriptorHeader) {
    return UcxInvalid("stage descriptor", std::to_string(size) + " bytes, at least " +
                                              std::to_string(kUcxStageDescriptorHeader) +
                                              " needed");
  }
  const auto* bytes = static_cast<const uint8_t*>(data);
  const auto key_length = LoadAt<uint32_t>(bytes, 4);
  if (key_length == 0 || key_length > kUcxMaxNameLength) {
    return UcxInvalid("stage descriptor", "key length " + std::to_string(key_length) +
                                              " outside 1.." + std::to_string(kUcxMaxNameLength));
  }
  if (size != kUcxStageDescriptorHeader + key_length) {
    return UcxInvalid("stage descriptor",
                      std::to_string(size) + " bytes for a key of " + std::to_string(key_length));
  }
  UcxStageDescriptor d;
  d.region = LoadAt<uint32_t>(bytes, 0);
  d.generation = LoadAt<uint64_t>(bytes, 8);
  d.record_offset = LoadAt<uint64_t>(bytes, 16);
  d.object_size = LoadAt<uint64_t>(bytes, 24);
  d.key.assign(reinterpret_cast<const char*>(bytes + kUcxStageDescriptorHeader), key_length);
  return d;
}

}  // namespace tierkv::transport
