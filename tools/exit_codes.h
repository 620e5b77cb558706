// The exit codes every tierkv subcommand shares: 0 success, 1 the command ran and failed, 2 a
// bad flag or value (nothing was started).
#pragma once

namespace tierkv::cli {

inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

}  // namespace tierkv::cli
