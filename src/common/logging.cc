#include "common/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>
#include <string>

namespace tierkv {

void InitLogging() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Logs go to stderr so a program's stdout carries only its results.
    spdlog::set_default_logger(spdlog::stderr_color_mt("tierkv"));
    spdlog::set_pattern("[%Y-%m-%d %H:%M:%S.%e] [tierkv] [%l] %v");
    spdlog::set_level(spdlog::level::info);
    const char* env = std::getenv("TIERKV_LOG_LEVEL");
    if (env == nullptr || *env == '\0') return;
    std::string level(env);
    std::transform(level.begin(), level.end(), level.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    // spdlog maps unknown names to "off"; a typo must not silence the logs.
    static const char* const kNames[] = {"trace", "debug", "info", "warn", "error", "off"};
    if (std::find(std::begin(kNames), std::end(kNames), level) == std::end(kNames)) {
      spdlog::warn(
          "TIERKV_LOG_LEVEL='{}' is not one of trace|debug|info|warn|error|off; using info", env);
      return;
    }
    spdlog::set_level(spdlog::level::from_str(level));
  });
}

}  // namespace tierkv
