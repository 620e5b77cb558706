// Builds spdlog's registry (and its default logger) before main, while the process has one
// thread. libspdlog.so is not built with TSan, so the thread-safe initialisation of the
// registry's function-local static is invisible to it: two test threads logging for the first
// time at once read as a data race on the logger's level (CI, 2026-12-02,
// MasterConcurrencyTest.RacingOperationsKeepSpaceAccountingExactWithReusePolicy). Processes of
// tierkv itself log from main (InitLogging) before they start threads.
#include <spdlog/spdlog.h>

namespace {

[[maybe_unused]] const bool kSpdlogReady = spdlog::default_logger_raw() != nullptr;

}  // namespace
