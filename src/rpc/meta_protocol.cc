#include "rpc/meta_protocol.h"

#include <bit>
#include <cstring>
#include <string>

#include "common/byte_io.h"
#include "rpc/wire.h"

namespace tierkv {
namespace {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");
static_assert(kMetaMaxMessageBytes == static_cast<uint32_t>(wire::kMaxMessageBytes),
              "the metadata channel carries the messages gRPC carries");

template <size_t N>
void PutPrologue(std::array<uint8_t, N>& out) {
  std::memcpy(out.data(), kMetaMagic, 4);
  StoreAt<uint16_t>(out.data(), 4, kMetaProtocolVersion);
}

Status Bad(std::string what) {
  return Status(ErrorCode::INVALID_PARAMS, "metadata channel: " + std::move(what));
}

// Magic and version; each decoder checks the rest.
template <size_t N>
Status CheckPrologue(const std::array<uint8_t, N>& in, const char* frame) {
  if (std::memcmp(in.data(), kMetaMagic, 4) != 0) {
    return Bad(std::string(frame) + ": bad magic (not a tierkv master's metadata channel)");
  }
  const uint16_t version = LoadAt<uint16_t>(in.data(), 4);
  if (version != kMetaProtocolVersion) {
    return Bad(std::string(frame) + ": version " + std::to_string(version) + ", this side speaks " +
               std::to_string(kMetaProtocolVersion));
  }
  return Status::Ok();
}

TokenDigest DigestAt(const uint8_t* data) {
  TokenDigest d{};
  std::memcpy(d.data(), data, d.size());
  return d;
}

Status CheckLength(uint32_t length, const char* frame) {
  if (length > kMetaMaxMessageBytes) {
    return Bad(std::string(frame) + ": length " + std::to_string(length) + " over the limit of " +
               std::to_string(kMetaMaxMessageBytes));
  }
  return Status::Ok();
}

}  // namespace

const char* MetaMethodName(MetaMethod method) {
  switch (method) {
    case MetaMethod::kPutStart:
      return "PutStart";
    case MetaMethod::kPutEnd:
      return "PutEnd";
    case MetaMethod::kPutRevoke:
      return "PutRevoke";
    case MetaMethod::kExists:
      return "Exists";
    case MetaMethod::kGetReplicas:
      return "GetReplicas";
    case MetaMethod::kRemove:
      return "Remove";
  }
  return "unknown";
}

MetaChallengeBytes EncodeMetaChallenge(const MetaChallenge& challenge) {
  MetaChallengeBytes out{};
  PutPrologue(out);
  StoreAt<uint16_t>(out.data(), 6, challenge.token_required ? 1 : 0);
  StoreAt<uint32_t>(out.data(), 8, challenge.idle_timeout_ms);
  std::memcpy(out.data() + 16, challenge.nonce.data(), challenge.nonce.size());
  return out;
}

MetaHelloBytes EncodeMetaHello(const TokenDigest& proof) {
  MetaHelloBytes out{};
  PutPrologue(out);
  std::memcpy(out.data() + 8, proof.data(), proof.size());
  return out;
}

MetaWelcomeBytes EncodeMetaWelcome(const MetaWelcome& welcome) {
  MetaWelcomeBytes out{};
  PutPrologue(out);
  StoreAt<int32_t>(out.data(), 8, welcome.status);
  std::memcpy(out.data() + 16, welcome.proof.data(), welcome.proof.size());
  return out;
}

MetaCallHeaderBytes EncodeMetaCallHeader(const MetaCallHeader& header) {
  MetaCallHeaderBytes out{};
  StoreAt<uint32_t>(out.data(), 0, header.length);
  StoreAt<uint16_t>(out.data(), 4, static_cast<uint16_t>(header.method));
  return out;
}

MetaAnswerHeaderBytes EncodeMetaAnswerHeader(const MetaAnswerHeader& header) {
  MetaAnswerHeaderBytes out{};
  StoreAt<uint32_t>(out.data(), 0, header.length);
  StoreAt<uint16_t>(out.data(), 4, header.method);
  StoreAt<int32_t>(out.data(), 8, header.status);
  return out;
}

Result<MetaChallenge> DecodeMetaChallenge(const MetaChallengeBytes& in) {
  if (Status st = CheckPrologue(in, "challenge"); !st.ok()) return st;
  const uint16_t flags = LoadAt<uint16_t>(in.data(), 6);
  if ((flags & ~uint16_t{1}) != 0) return Bad("challenge: unknown flags " + std::to_string(flags));
  if (LoadAt<uint32_t>(in.data(), 12) != 0) return Bad("challenge: reserved bytes are not 0");
  MetaChallenge out;
  out.token_required = (flags & 1) != 0;
  out.idle_timeout_ms = LoadAt<uint32_t>(in.data(), 8);
  out.nonce = DigestAt(in.data() + 16);
  return out;
}

Result<TokenDigest> DecodeMetaHello(const MetaHelloBytes& in) {
  if (Status st = CheckPrologue(in, "hello"); !st.ok()) return st;
  if (LoadAt<uint16_t>(in.data(), 6) != 0) return Bad("hello: reserved bytes are not 0");
  return DigestAt(in.data() + 8);
}

Result<MetaWelcome> DecodeMetaWelcome(const MetaWelcomeBytes& in) {
  if (Status st = CheckPrologue(in, "welcome"); !st.ok()) return st;
  if (LoadAt<uint16_t>(in.data(), 6) != 0 || LoadAt<uint32_t>(in.data(), 12) != 0) {
    return Bad("welcome: reserved bytes are not 0");
  }
  MetaWelcome out;
  out.status = LoadAt<int32_t>(in.data(), 8);
  out.proof = DigestAt(in.data() + 16);
  return out;
}

Result<MetaCallHeader> DecodeMetaCallHeader(const MetaCallHeaderBytes& in) {
  MetaCallHeader out;
  out.length = LoadAt<uint32_t>(in.data(), 0);
  if (Status st = CheckLength(out.length, "call"); !st.ok()) return st;
  const uint16_t method = LoadAt<uint16_t>(in.data(), 4);
  if (method == 0 || method > kMetaMaxMethod) {
    return Bad("call: unknown method " + std::to_string(method));
  }
  if (LoadAt<uint16_t>(in.data(), 6) != 0) return Bad("call: reserved bytes are not 0");
  out.method = static_cast<MetaMethod>(method);
  return out;
}

Result<MetaAnswerHeader> DecodeMetaAnswerHeader(const MetaAnswerHeaderBytes& in) {
  MetaAnswerHeader out;
  out.length = LoadAt<uint32_t>(in.data(), 0);
  if (Status st = CheckLength(out.length, "answer"); !st.ok()) return st;
  out.method = LoadAt<uint16_t>(in.data(), 4);
  if (LoadAt<uint16_t>(in.data(), 6) != 0) return Bad("answer: reserved bytes are not 0");
  out.status = LoadAt<int32_t>(in.data(), 8);
  return out;
}

}  // namespace tierkv
