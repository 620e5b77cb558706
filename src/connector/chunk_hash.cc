// Chunk hashes (include/tierkv/connector.h): SHA-256 through OpenSSL's EVP interface,
// xxh3-128 through libxxhash's streaming state. The input of chunk i is framed (lengths
// before the token ids and the extra key) so that no two different (tokens, extra) pairs
// feed the hash the same bytes.
#include <openssl/evp.h>
#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "tierkv/connector.h"

namespace tierkv::connector {
namespace {

void PutLe32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutLe64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

struct EvpCtxFree {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
struct XxhStateFree {
  void operator()(XXH3_state_t* s) const { XXH3_freeState(s); }
};

// One digest of `input` (the framed chunk) with the algorithm's state reused across chunks.
class Hasher {
 public:
  explicit Hasher(HashAlgorithm algorithm) : algorithm_(algorithm) {
    if (algorithm_ == HashAlgorithm::kSha256) {
      evp_.reset(EVP_MD_CTX_new());
    } else {
      xxh_.reset(XXH3_createState());
    }
  }
  bool ok() const { return evp_ != nullptr || xxh_ != nullptr; }

  bool Digest(const std::string& input, std::string& out) {
    if (algorithm_ == HashAlgorithm::kSha256) {
      unsigned char md[EVP_MAX_MD_SIZE];
      unsigned int len = 0;
      if (EVP_DigestInit_ex(evp_.get(), EVP_sha256(), nullptr) != 1 ||
          EVP_DigestUpdate(evp_.get(), input.data(), input.size()) != 1 ||
          EVP_DigestFinal_ex(evp_.get(), md, &len) != 1) {
        return false;
      }
      out.assign(reinterpret_cast<const char*>(md), len);
      return true;
    }
    if (XXH3_128bits_reset(xxh_.get()) == XXH_ERROR ||
        XXH3_128bits_update(xxh_.get(), input.data(), input.size()) == XXH_ERROR) {
      return false;
    }
    XXH128_canonical_t canonical;
    XXH128_canonicalFromHash(&canonical, XXH3_128bits_digest(xxh_.get()));
    out.assign(reinterpret_cast<const char*>(canonical.digest), sizeof(canonical.digest));
    return true;
  }

 private:
  const HashAlgorithm algorithm_;
  std::unique_ptr<EVP_MD_CTX, EvpCtxFree> evp_;
  std::unique_ptr<XXH3_state_t, XxhStateFree> xxh_;
};

}  // namespace

Result<HashAlgorithm> ParseHashAlgorithm(std::string_view name) {
  if (name == "sha256") return HashAlgorithm::kSha256;
  if (name == "xxh3_128") return HashAlgorithm::kXxh3_128;
  return Status(ErrorCode::INVALID_PARAMS,
                "hash algorithm must be 'sha256' or 'xxh3_128', got '" + std::string(name) + "'");
}

std::string_view HashAlgorithmName(HashAlgorithm algorithm) {
  return algorithm == HashAlgorithm::kSha256 ? "sha256" : "xxh3_128";
}

size_t DigestSize(HashAlgorithm algorithm) { return algorithm == HashAlgorithm::kSha256 ? 32 : 16; }

Result<std::vector<std::string>> ChunkHashes(const ChunkHashOptions& options,
                                             std::span<const int64_t> tokens,
                                             const std::vector<std::string>& extra_keys) {
  if (options.chunk_size == 0 || options.chunk_size > UINT32_MAX) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "chunk_size must be in [1, 2^32), got " + std::to_string(options.chunk_size));
  }
  for (const std::string& extra : extra_keys) {
    if (extra.size() > UINT32_MAX) {
      return Status(ErrorCode::INVALID_PARAMS, "an extra key is 4 GiB or longer");
    }
  }
  const size_t full = tokens.size() / options.chunk_size;
  const bool partial = options.hash_partial_last && tokens.size() % options.chunk_size != 0;
  const size_t chunks = full + (partial ? 1 : 0);
  if (!extra_keys.empty() && extra_keys.size() != chunks) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "extra_keys has " + std::to_string(extra_keys.size()) +
                      " entries; it must be empty or hold one per hashed chunk (" +
                      std::to_string(chunks) + ")");
  }
  Hasher hasher(options.algorithm);
  if (!hasher.ok()) return Status(ErrorCode::INTERNAL_ERROR, "cannot create a hash state");
  std::vector<std::string> out;
  out.reserve(chunks);
  std::string input;
  std::string prev;  // h_{-1} is empty
  for (size_t c = 0; c < chunks; ++c) {
    const size_t begin = c * options.chunk_size;
    const size_t n = std::min(options.chunk_size, tokens.size() - begin);
    input.clear();
    input.reserve(prev.size() + 8 + 8 * n + (extra_keys.empty() ? 0 : extra_keys[c].size()));
    input.append(prev);
    PutLe32(input, static_cast<uint32_t>(n));
    for (size_t t = begin; t < begin + n; ++t) PutLe64(input, static_cast<uint64_t>(tokens[t]));
    const std::string_view extra = extra_keys.empty() ? std::string_view() : extra_keys[c];
    PutLe32(input, static_cast<uint32_t>(extra.size()));
    input.append(extra);
    std::string digest;
    if (!hasher.Digest(input, digest)) {
      return Status(ErrorCode::INTERNAL_ERROR,
                    std::string("hashing chunk ") + std::to_string(c) + " with " +
                        std::string(HashAlgorithmName(options.algorithm)) + " failed");
    }
    prev = digest;
    out.push_back(std::move(digest));
  }
  return out;
}

std::string Hex(std::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = kDigits[b >> 4];
    out[2 * i + 1] = kDigits[b & 0xf];
  }
  return out;
}

}  // namespace tierkv::connector
