// `tierkv master`: the metadata service as its own process (gRPC control plane).
//
// Runs a MasterServer until SIGINT or SIGTERM. Once serving it prints exactly one line on
// stdout, flushed: "tierkv master listening on HOST:PORT" (with --port 0, the port the kernel
// chose), so scripts and tests can read the address. Logs go to stderr.
#pragma once

#include <CLI/CLI.hpp>

namespace tierkv::cli {

// Adds the `master` subcommand to `app`; when it runs, its exit code goes to *exit_code
// (0 after a clean shutdown, 1 if it could not serve, 2 for bad flag values).
void AddMasterCommand(CLI::App& app, int* exit_code);

}  // namespace tierkv::cli
