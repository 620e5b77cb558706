// Per-key results of the client's batch calls, as the tests compare them.
#pragma once

#include "tierkv/status.h"

namespace tierkv {

inline constexpr int kOk = 0;
inline int Code(ErrorCode c) { return ToInt(c); }

}  // namespace tierkv
