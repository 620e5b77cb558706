#include "transport/shm_protocol.h"

#include <cstring>
#include <string>

#include "common/byte_io.h"

namespace tierkv::transport {
namespace {

Status ShmInvalid(const std::string& what) {
  return Status(ErrorCode::INVALID_PARAMS, "shm handshake: " + what);
}

}  // namespace

std::vector<uint8_t> EncodeShmRequest(std::string_view segment_name) {
  std::vector<uint8_t> out(kShmRequestHeaderSize + segment_name.size());
  std::memcpy(out.data(), kShmMagic, sizeof(kShmMagic));
  StoreAt<uint32_t>(out.data(), 8, kShmProtocolVersion);
  StoreAt<uint32_t>(out.data(), 12, static_cast<uint32_t>(segment_name.size()));
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
    return ShmInvalid("request truncated: " + std::to_string(size) + " bytes, the header has " +
                      std::to_string(kShmRequestHeaderSize));
  }
  if (!HasShmMagic(data, size)) return ShmInvalid("request has a wrong magic (not TKVSHM01)");
  const auto version = LoadAt<uint32_t>(data, 8);
  if (version != kShmProtocolVersion) {
    return ShmInvalid("request version " + std::to_string(version) + ", this side speaks " +
                      std::to_string(kShmProtocolVersion));
  }
  const auto name_length = LoadAt<uint32_t>(data, 12);
  if (name_length == 0 || name_length > kShmMaxNameLength) {
    return ShmInvalid("request name length " + std::to_string(name_length) + " outside 1.." +
                      std::to_string(kShmMaxNameLength));
  }
  return kShmRequestHeaderSize + name_length;
}

Result<ShmRequest> DecodeShmRequest(const uint8_t* data, size_t size) {
  Result<size_t> expected = DecodeShmRequestHeader(data, size);
  if (!expected.ok()) return expected.status();
  if (size != *expected) {
    return ShmInvalid(std::string(size < *expected ? "request truncated: " : "trailing bytes: ") +
                      std::to_string(size) + " bytes, the header announces " +
                      std::to_string(*expected));
  }
  ShmRequest request;
  request.version = LoadAt<uint32_t>(data, 8);
  request.segment_name.assign(reinterpret_cast<const char*>(data) + kShmRequestHeaderSize,
                              size - kShmRequestHeaderSize);
  return request;
}

std::vector<uint8_t> EncodeShmReply(const ShmReply& reply) {
  std::vector<uint8_t> out(kShmReplySize);
  std::memcpy(out.data(), kShmMagic, sizeof(kShmMagic));
  StoreAt<uint32_t>(out.data(), 8, reply.version);
  StoreAt<int32_t>(out.data(), 12, reply.status);
  StoreAt<uint64_t>(out.data(), 16, reply.segment_size);
  StoreAt<uint64_t>(out.data(), 24, reply.page_size);
  return out;
}

Result<ShmReply> DecodeShmReply(const uint8_t* data, size_t size) {
  if (size != kShmReplySize) {
    return ShmInvalid("reply of " + std::to_string(size) + " bytes, expected " +
                      std::to_string(kShmReplySize));
  }
  if (!HasShmMagic(data, size)) return ShmInvalid("reply has a wrong magic (not TKVSHM01)");
  ShmReply reply;
  reply.version = LoadAt<uint32_t>(data, 8);
  reply.status = LoadAt<int32_t>(data, 12);
  reply.segment_size = LoadAt<uint64_t>(data, 16);
  reply.page_size = LoadAt<uint64_t>(data, 24);
  return reply;
}

}  // namespace tierkv::transport
