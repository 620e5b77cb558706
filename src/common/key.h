// Key validation shared by the client and the master.
#pragma once

#include <string_view>

#include "tierkv/status.h"

namespace tierkv {

// OK, or INVALID_KEY naming the rule broken: empty, longer than kMaxKeyLength,
// not valid UTF-8 (overlong forms and surrogates rejected), or contains NUL.
Status ValidateKey(std::string_view key);
// Valid UTF-8 without NUL bytes (NUL is valid UTF-8 but never a valid key byte).
bool IsValidUtf8(std::string_view text);
// A tenant's name: 1..64 characters of A-Z a-z 0-9 _ . - (tenant_id, tierkv store --tenant,
// the master's tenants file).
bool IsTenantName(std::string_view name);

}  // namespace tierkv
