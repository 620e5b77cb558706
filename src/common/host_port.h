// Strict parsing of "host:port" strings (a master's address, an etcd endpoint, --advertise):
// the port is 1..65535 in decimal digits only, the host is not empty, and an IPv6 literal is in
// brackets ("[::1]:50051"). gRPC itself would take "host:99999" as port 34463 (mod 65536).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "tierkv/status.h"

namespace tierkv {

// INVALID_PARAMS naming `what` (a flag or config key) and the problem; OK for a good address.
Status CheckHostPort(std::string_view address, std::string_view what);

}  // namespace tierkv
