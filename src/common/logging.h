// Logging goes through spdlog's default logger; this sets it up once.
#pragma once

namespace tierkv {

// Logs to stderr. Level from TIERKV_LOG_LEVEL (trace|debug|info|warn|error|off; default info).
// Idempotent and thread-safe.
void InitLogging();

}  // namespace tierkv
