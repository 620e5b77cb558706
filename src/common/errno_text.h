// The text of an errno value, for error messages.
// Thread-safety: std::strerror's text for a valid errno is a constant string on glibc.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>

#include "tierkv/status.h"

namespace tierkv {

inline std::string ErrnoText(int err) { return std::strerror(err); }

// INTERNAL_ERROR "<what>: <the text of errno>", for a system call that failed just now.
inline Status ErrnoStatus(const std::string& what) {
  return Status(ErrorCode::INTERNAL_ERROR, what + ": " + std::strerror(errno));
}
}  // namespace tierkv
