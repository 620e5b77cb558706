#include "common/cluster_token.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <utility>

#include "common/errno_text.h"
#include "common/unique_fd.h"

namespace tierkv {
namespace {

constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 4096;

Status TokenError(const std::string& path, const std::string& what) {
  return Status(ErrorCode::INVALID_CONFIG, "token file " + path + ": " + what);
}

TokenDigest Sha256(std::string_view bytes) {
  TokenDigest out{};
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), out.data());
  return out;
}

// Every TokenSet loaded from files, for ReloadAllTokenSets.
std::mutex loaded_mu;
std::vector<std::weak_ptr<TokenSet>>& Loaded() {
  static auto* loaded = new std::vector<std::weak_ptr<TokenSet>>();
  return *loaded;
}

}  // namespace

Result<std::string> ReadTokenFile(const std::string& path) {
  return ReadSecretFile(path, kMinTokenBytes);
}

Result<std::string> ReadSecretFile(const std::string& path, size_t min_bytes) {
  if (path.empty()) return Status(ErrorCode::INVALID_CONFIG, "token file: the path is empty");
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY));
  if (!fd.valid()) {
    const int err = errno;
    if (err == ELOOP) return TokenError(path, "is a symbolic link (refused; name the file itself)");
    return TokenError(path, "cannot open: " + ErrnoText(err));
  }
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) return TokenError(path, "fstat: " + ErrnoText(errno));
  if (!S_ISREG(st.st_mode)) return TokenError(path, "is not a regular file");
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return TokenError(path, std::string("has mode ") + mode +
                                ": group and others must have no access (mode 0600 or "
                                "stricter: chmod 600 " +
                                path + ")");
  }
  if (st.st_size > static_cast<off_t>(kMaxTokenBytes + 64)) {
    return TokenError(path, "is " + std::to_string(st.st_size) + " bytes; a token is at most " +
                                std::to_string(kMaxTokenBytes));
  }
  std::string secret(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t have = 0;
  while (have < secret.size()) {
    const ssize_t n = ::read(fd.get(), secret.data() + have, secret.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return TokenError(path, "read: " + ErrnoText(errno));
    if (n == 0) break;
    have += static_cast<size_t>(n);
  }
  secret.resize(have);
  while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' ||
                             secret.back() == ' ' || secret.back() == '\t')) {
    secret.pop_back();
  }
  if (secret.size() < min_bytes || secret.size() > kMaxTokenBytes) {
    return TokenError(path, "holds " + std::to_string(secret.size()) +
                                " bytes of secret; it must hold " + std::to_string(min_bytes) +
                                ".." + std::to_string(kMaxTokenBytes) +
                                " bytes (a token: e.g. openssl rand -hex 32)");
  }
  return secret;
}

TokenDigest TokenMac(std::string_view secret, std::initializer_list<std::string_view> parts) {
  // Each part is length-prefixed: ("ab","c") and ("a","bc") give different MACs.
  std::string message;
  for (std::string_view part : parts) {
    const uint32_t size = static_cast<uint32_t>(part.size());
    message.append(reinterpret_cast<const char*>(&size), sizeof(size));
    message.append(part);
  }
  TokenDigest out{};
  unsigned int length = 0;
  HMAC(EVP_sha256(), secret.data(), static_cast<int>(secret.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out.data(), &length);
  return out;
}

TokenDigest RandomNonce() {
  TokenDigest out{};
  size_t have = 0;
  while (have < out.size()) {
    const ssize_t n = getrandom(out.data() + have, out.size() - have, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      // getrandom never fails once the pool is initialised; abort rather than use a weak nonce.
      std::perror("tierkv: getrandom");
      std::abort();
    }
    have += static_cast<size_t>(n);
  }
  return out;
}

bool DigestsEqual(const TokenDigest& a, const TokenDigest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

TokenSet::Secrets TokenSet::Make(std::vector<std::string> secrets) {
  Secrets out;
  if (!secrets.empty()) out.own = secrets.front();
  for (std::string& s : secrets) {
    out.digests.push_back(Sha256(s));
    out.accepted.push_back(std::move(s));
  }
  return out;
}

Result<std::shared_ptr<TokenSet>> TokenSet::Load(std::string token_file,
                                                 std::string accept_token_file) {
  std::shared_ptr<TokenSet> set(new TokenSet(std::move(token_file), std::move(accept_token_file)));
  if (Status st = set->Reload(); !st.ok()) return st;
  std::lock_guard lock(loaded_mu);
  auto& loaded = Loaded();
  std::erase_if(loaded, [](const std::weak_ptr<TokenSet>& w) { return w.expired(); });
  loaded.push_back(set);
  return set;
}

std::shared_ptr<TokenSet> TokenSet::FromSecrets(std::vector<std::string> secrets) {
  std::shared_ptr<TokenSet> set(new TokenSet("", ""));
  set->secrets_ = Make(std::move(secrets));
  return set;
}

Status TokenSet::Reload() {
  if (token_file_.empty()) return Status::Ok();  // in-memory secrets
  std::vector<std::string> secrets;
  for (const std::string* path : {&token_file_, &accept_token_file_}) {
    if (path->empty()) continue;
    Result<std::string> secret = ReadTokenFile(*path);
    if (!secret.ok()) return secret.status();
    secrets.push_back(std::move(secret).value());
  }
  Secrets made = Make(std::move(secrets));
  std::lock_guard lock(mu_);
  secrets_ = std::move(made);
  return Status::Ok();
}

TokenSet::Secrets TokenSet::Snapshot() const {
  std::lock_guard lock(mu_);
  return secrets_;
}

std::string TokenSet::own() const {
  std::lock_guard lock(mu_);
  return secrets_.own;
}

bool TokenSet::Accepts(std::string_view presented) const {
  const TokenDigest digest = Sha256(presented);
  std::lock_guard lock(mu_);
  bool match = false;
  for (const TokenDigest& d : secrets_.digests) match |= DigestsEqual(d, digest);
  return match;
}

std::string TokenSet::MatchMac(const TokenDigest& mac,
                               std::initializer_list<std::string_view> parts) const {
  const Secrets secrets = Snapshot();
  std::string found;
  for (const std::string& secret : secrets.accepted) {
    if (DigestsEqual(TokenMac(secret, parts), mac) && found.empty()) found = secret;
  }
  return found;
}

Status ReloadAllTokenSets() {
  std::vector<std::shared_ptr<TokenSet>> sets;
  {
    std::lock_guard lock(loaded_mu);
    for (const auto& w : Loaded()) {
      if (auto s = w.lock()) sets.push_back(std::move(s));
    }
  }
  Status first = Status::Ok();
  for (const auto& set : sets) {
    Status st = set->Reload();
    if (!st.ok() && first.ok()) first = st;
  }
  return first;
}

}  // namespace tierkv
