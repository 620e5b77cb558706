// Reads a PEM file (a certificate, a key, a CA bundle) for TLS: the control plane's
// (rpc/channel_security.h) and the data plane's (transport/tls_stream.h).
// Thread-safety: a pure function.
#pragma once

#include <string>

#include "tierkv/status.h"

namespace tierkv {

// INVALID_CONFIG naming `what` (the key or flag) and the path when the file cannot be read or
// holds no PEM block.
Result<std::string> ReadPemFile(const std::string& path, const char* what);

}  // namespace tierkv
