#include "transport/shm_protocol.h"

#include <cstring>
#include <string>

namespace tierkv::transport {
namespace {

template <typename T>
void Put(std::vector<uint8_t>& out, size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof(value));
}

template <typename T>
T Get(const uint8_t* data, size_t offset) {
  T value;
  std::memcpy(&value, data + offset, sizeof(value));
  return value;
}

Status Invalid(const std::string& what) {
  return Status(ErrorCode::INVALID_PARAMS, "shm handshake: " + what);
}

}  // namespace

std::vector<uint8_t> EncodeShmRequest(std::string_view segment_name) {
  std::vector<uint8_t> out(kShmRequestHeaderSize + segment_name.size());
  std::memcpy(out.data(), kShmMagic, sizeof(kShmMagic));
  Put<uint32_t>(out, 8, kShmProtocolVersion);
  Put<uint32_t>(out, 12, static_cast<uint32_t>(segment_name.size()));
  if (!segment_name.empty()) {
    std::memcpy(out.data() + kShmRequestHeaderSize, segment_name.data(), segment_name.size());
  }
  return out;
}

bool HasShmMagic(const uint8_t* data, size_t size) {
  return size >= sizeof(kShmMagic) && std::memcmp(data, kShmMagic, sizeof(kShmMagic)) == 0;
}

Result<size_t> DecodeShmRequestHeader(const uint8_t* data, size_t size) {
  if (size < kShmRequestHeaderSize) {
    return Invalid("request truncated: " + std::to_string(size) + " bytes, the header has " +
                   std::to_string(kShmRequestHeaderSize));
  }
  if (!HasShmMagic(data, size)) return Invalid("request has a wrong magic (not TKVSHM01)");
  const auto version = Get<uint32_t>(data, 8);
  if (version != kShmProtocolVersion) {
    return Invalid("request version " + std::to_string(version) + ", this side speaks " +
                   std::to_string(kShmProtocolVersion));
  }
  const auto name_length = Get<uint32_t>(data, 12);
  if (name_length == 0 || name_length > kShmMaxNameLength) {
    return Invalid("request name length " + std::to_string(name_length) + " outside 1.." +
                   std::to_string(kShmMaxNameLength));
  }
  return kShmRequestHeaderSize + name_length;
}

Result<ShmRequest> DecodeShmRequest(const uint8_t* data, size_t size) {
  Result<size_t> expected = DecodeShmRequestHeader(data, size);
  if (!expected.ok()) return expected.status();
  if (size != *expected) {
    return Invalid(std::string(size < *expected ? "request truncated: " : "trailing bytes: ") +
                   std::to_string(size) + " bytes, the header announces " +
                   std::to_string(*expected));
  }
  ShmRequest request;
  request.version = Get<uint32_t>(data, 8);
  request.segment_name.assign(reinterpret_cast<const char*>(data) + kShmRequestHeaderSize,
                              size - kShmRequestHeaderSize);
  return request;
}

std::vector<uint8_t> EncodeShmReply(const ShmReply& reply) {
  std::vector<uint8_t> out(kShmReplySize);
  std::memcpy(out.data(), kShmMagic, sizeof(kShmMagic));
  Put<uint32_t>(out, 8, reply.version);
  Put<int32_t>(out, 12, reply.status);
  Put<uint64_t>(out, 16, reply.segment_size);
  Put<uint64_t>(out, 24, reply.page_size);
  return out;
}

Result<ShmReply> DecodeShmReply(const uint8_t* data, size_t size) {
  if (size != kShmReplySize) {
    return Invalid("reply of " + std::to_string(size) + " bytes, expected " +
                   std::to_string(kShmReplySize));
  }
  if (!HasShmMagic(data, size)) return Invalid("reply has a wrong magic (not TKVSHM01)");
  ShmReply reply;
  reply.version = Get<uint32_t>(data, 8);
  reply.status = Get<int32_t>(data, 12);
  reply.segment_size = Get<uint64_t>(data, 16);
  reply.page_size = Get<uint64_t>(data, 24);
  return reply;
}

}  // namespace tierkv::transport
