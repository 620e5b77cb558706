#include "common/key.h"

#include <cstdint>
#include <cstring>
#include <string>

#include "tierkv/types.h"

namespace tierkv {

bool IsValidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time: KV keys are almost always ASCII.
    if (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s + i, 8);
      // No byte >= 0x80 and no zero byte (the NUL check rides along for free).
      const uint64_t has_zero = (word - 0x0101010101010101ull) & ~word & 0x8080808080808080ull;
      if ((word & 0x8080808080808080ull) == 0 && has_zero == 0) {
        i += 8;
        continue;
      }
    }
    const uint8_t c = s[i];
    if (c == 0) return false;
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    uint32_t cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + len > n) return false;
    for (size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    // Overlong encodings, surrogates and code points past U+10FFFF.
    if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) {
      return false;
    }
    i += len;
  }
  return true;
}

Status ValidateKey(std::string_view key) {
  if (key.empty()) return Status(ErrorCode::INVALID_KEY, "key is empty");
  if (key.size() > kMaxKeyLength) {
    return Status(ErrorCode::INVALID_KEY, "key is " + std::to_string(key.size()) +
                                              " bytes, longer than the maximum " +
                                              std::to_string(kMaxKeyLength));
  }
  if (!IsValidUtf8(key)) {
    // The rare failure path says which rule broke.
    if (key.find('\0') != std::string_view::npos) {
      return Status(ErrorCode::INVALID_KEY, "key contains a NUL byte");
    }
    return Status(ErrorCode::INVALID_KEY, "key is not valid UTF-8");
  }
  return Status::Ok();
}

bool IsTenantName(std::string_view name) {
  return !name.empty() && name.size() <= 64 &&
         name.find_first_not_of(
             "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
             "0123456789_.-") == std::string_view::npos;
}

}  // namespace tierkv
