// The cluster credential: a shared secret, read from a token file, that every tierkv peer of a
// cluster proves it holds (docs/security.md). The gRPC control plane carries it in each call's
// metadata (rpc/channel_security.h) and the TCP data plane proves it with an HMAC over a fresh
// challenge, so it never crosses the data port (transport/tcp_protocol.h).
//
// A TokenSet is what a process holds: the token it presents (`token_file`) and what it accepts
// from peers — that token and, during a rotation, a second one (`accept_token_file`). Reload()
// re-reads both files (tierkv master and tierkv store do on SIGHUP), so a cluster moves to a new
// token without a restart: accept the new one everywhere, switch the clients, drop the old one.
//
// The secret is never logged, never in an error message, never in a metric: messages name the
// file only. Comparisons are constant-time over the SHA-256 digests (no length leak).
// Thread-safety: TokenSet is thread-safe; Reload() may run beside every other call.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/status.h"

namespace tierkv {

using TokenDigest = std::array<uint8_t, 32>;  // SHA-256, or an HMAC-SHA256 value

// Reads a token file: a regular file (a symbolic link is refused), mode 0600 or stricter (no
// group or other bits), holding 16..4096 bytes of secret after trailing whitespace is dropped.
// Errors: INVALID_CONFIG naming the file and what is wrong (its mode, in octal, and the chmod
// that fixes it; missing; too short) — never the content.
Result<std::string> ReadTokenFile(const std::string& path);
// The same rules for another secret (a password) of at least `min_bytes`.
Result<std::string> ReadSecretFile(const std::string& path, size_t min_bytes);

// HMAC-SHA256 of `parts`, concatenated, under `secret`.
TokenDigest TokenMac(std::string_view secret, std::initializer_list<std::string_view> parts);
// 32 random bytes from the kernel (getrandom).
TokenDigest RandomNonce();
// Constant-time equality.
bool DigestsEqual(const TokenDigest& a, const TokenDigest& b);

class TokenSet {
 public:
  // Loads `token_file` (required) and `accept_token_file` ("" = none). Errors: ReadTokenFile's.
  static Result<std::shared_ptr<TokenSet>> Load(std::string token_file,
                                                std::string accept_token_file = "");
  // A set of in-memory secrets (tests, benches): the first is presented, all are accepted.
  static std::shared_ptr<TokenSet> FromSecrets(std::vector<std::string> secrets);

  // Re-reads the files; on an error keeps what it had and says why.
  Status Reload();

  // The secret this process presents.
  std::string own() const;
  // Whether `presented` is an accepted secret (constant time over every accepted one).
  bool Accepts(std::string_view presented) const;
  // The accepted secret for which TokenMac(secret, parts) == `mac`, if any: the data plane's
  // check of a peer's proof. Returns the secret ("" = none).
  std::string MatchMac(const TokenDigest& mac, std::initializer_list<std::string_view> parts) const;

  const std::string& token_file() const { return token_file_; }
  const std::string& accept_token_file() const { return accept_token_file_; }

 private:
  TokenSet(std::string token_file, std::string accept_token_file)
      : token_file_(std::move(token_file)), accept_token_file_(std::move(accept_token_file)) {}
  struct Secrets {
    std::string own;
    std::vector<std::string> accepted;  // own first
    std::vector<TokenDigest> digests;   // SHA-256 of each accepted one
  };
  static Secrets Make(std::vector<std::string> secrets);
  Secrets Snapshot() const;

  const std::string token_file_;
  const std::string accept_token_file_;
  mutable std::mutex mu_;
  Secrets secrets_;  // guarded by mu_
};

// Reloads every TokenSet loaded from files in this process (SIGHUP in tierkv master and tierkv
// store). Returns the first error, after trying them all.
Status ReloadAllTokenSets();

}  // namespace tierkv
