// Who may call the master, and in which keys: the cluster token, the stores' credential, the
// admin's and the tenants' (docs/security.md). One MasterAuth serves both of the master's ports —
// gRPC, where a call carries the secret in its metadata, and the metadata channel
// (rpc/meta_protocol.h), where a connection proves one over a nonce once, at its hello.
// Thread-safety: thread-safe (the TokenSets are, and reload on SIGHUP).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/cluster_token.h"

namespace tierkv {

// A tenant's credential (tierkv master --tenants-file): calls carrying its token act in its key
// namespace only.
struct TenantCredential {
  std::string name;
  std::string prefix;  // kKeyNamespaceMark + name + kKeyNamespaceMark
  std::shared_ptr<const TokenSet> tokens;
};

struct MasterCredentials {
  // The cluster token: every call must carry an accepted one; null = none (whoever reaches the
  // port is trusted).
  std::shared_ptr<const TokenSet> tokens;
  // The stores' credential: when set, only a caller presenting it may mount a segment, open a
  // segment's TierMoves stream or report its disk replicas; null = every holder of `tokens` may.
  std::shared_ptr<const TokenSet> store_tokens;
  // Tenants: each token acts in its tenant's keys only; with any tenant configured the cluster
  // token acts in the default tenant's keys, and whole-cluster calls need `admin_tokens` (or a
  // store's).
  std::vector<TenantCredential> tenants;
  std::shared_ptr<const TokenSet> admin_tokens;
};

class MasterAuth {
 public:
  explicit MasterAuth(MasterCredentials credentials) : c_(std::move(credentials)) {}

  // Whether the master requires a token at all.
  bool required() const { return c_.tokens != nullptr; }
  // Whether `secret` is accepted — the cluster's, a store's, the admin's or a tenant's (always,
  // on a master without tokens).
  bool Authenticated(std::string_view secret) const;
  // The key namespace a holder of `secret` may act in (MasterRpcHandler::CallScope): with
  // tenants configured, a tenant's token scopes it to its prefix and the cluster token to the
  // default tenant's keys ("" ); a store's and the admin's reach everything (null). Without
  // tenants: everything.
  const std::string* Scope(std::string_view secret) const;
  // Whether `secret` is a store's credential: the store token where one is configured, else
  // any accepted token (one credential for the whole cluster).
  bool IsStore(std::string_view secret) const;
  // The accepted secret (of any kind) whose HMAC over `parts` is `mac`; "" = none.
  std::string MatchMac(const TokenDigest& mac, std::initializer_list<std::string_view> parts) const;

 private:
  const MasterCredentials c_;
};

}  // namespace tierkv
