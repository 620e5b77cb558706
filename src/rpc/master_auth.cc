#include "rpc/master_auth.h"

namespace tierkv {

bool MasterAuth::Authenticated(std::string_view secret) const {
  if (c_.tokens == nullptr) return true;
  if (c_.tokens->Accepts(secret)) return true;
  if (c_.store_tokens != nullptr && c_.store_tokens->Accepts(secret)) return true;
  if (c_.admin_tokens != nullptr && c_.admin_tokens->Accepts(secret)) return true;
  for (const TenantCredential& t : c_.tenants) {
    if (t.tokens->Accepts(secret)) return true;
  }
  return false;
}

const std::string* MasterAuth::Scope(std::string_view secret) const {
  if (c_.tenants.empty()) return nullptr;
  for (const TenantCredential& t : c_.tenants) {
    if (t.tokens->Accepts(secret)) return &t.prefix;
  }
  if (c_.admin_tokens != nullptr && c_.admin_tokens->Accepts(secret)) return nullptr;
  if (c_.store_tokens != nullptr && c_.store_tokens->Accepts(secret)) return nullptr;
  static const std::string kDefaultTenant;
  return &kDefaultTenant;
}

bool MasterAuth::IsStore(std::string_view secret) const {
  return c_.store_tokens == nullptr || c_.store_tokens->Accepts(secret);
}

std::string MasterAuth::MatchMac(const TokenDigest& mac,
                                 std::initializer_list<std::string_view> parts) const {
  if (c_.tokens == nullptr) return {};
  std::vector<const TokenSet*> sets{c_.tokens.get(), c_.store_tokens.get(), c_.admin_tokens.get()};
  for (const TenantCredential& t : c_.tenants) sets.push_back(t.tokens.get());
  for (const TokenSet* set : sets) {
    if (set == nullptr) continue;
    std::string secret = set->MatchMac(mac, parts);
    if (!secret.empty()) return secret;
  }
  return {};
}

}  // namespace tierkv
