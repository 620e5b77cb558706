#include "common/key.h"

#include <cstdint>
#include <string>

#include "tierkv/types.h"

namespace tierkv {

bool IsValidUtf8(std::string_view text) {
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t c = s[i];
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
  if (key.find('\0') != std::string_view::npos) {
    return Status(ErrorCode::INVALID_KEY, "key contains a NUL byte");
  }
  if (!IsValidUtf8(key)) return Status(ErrorCode::INVALID_KEY, "key is not valid UTF-8");
  return Status::Ok();
}

}  // namespace tierkv
