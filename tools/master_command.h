// `tierkv master`: the metadata service as its own process (gRPC control plane).
//
// Runs a MasterServer, and a MetricsServer for Prometheus (/metrics, /health) unless
// --metrics-port is -1, until SIGINT or SIGTERM. Once serving it prints on stdout, flushed:
// "tierkv master listening on HOST:PORT" (with --port 0, the port the kernel chose), then, with
// metrics, "tierkv master metrics on HOST:PORT", so scripts and tests can read the addresses.
// Logs go to stderr.
#pragma once

#include <CLI/CLI.hpp>

namespace tierkv::cli {

// Adds the `master` subcommand to `app`; when it runs, its exit code goes to *exit_code
// (0 after a clean shutdown, 1 if it could not serve, 2 for bad flag values).
void AddMasterCommand(CLI::App& app, int* exit_code);

}  // namespace tierkv::cli
