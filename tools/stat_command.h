// `tierkv stat --master HOST:PORT [--json] [--timeout-ms N]`: what a running `tierkv master`
// holds, from one Stats RPC (RemoteMaster::QueryStats; it does not register, so it does not
// count itself as a client).
//
// Prints a summary on stdout: each segment's usage, objects, memory and disk replicas, the
// GetReplicas hit rate, evictions, demotions and clients; with --json, one JSON object instead
// (docs/metrics.md lists its fields). An unreachable master is an error on stderr within the
// timeout.
#pragma once

#include <CLI/CLI.hpp>

namespace tierkv::cli {

// Adds the `stat` subcommand to `app`; when it runs, its exit code goes to *exit_code (0 after
// printing, 1 if the master could not be asked, 2 for bad flag values).
void AddStatCommand(CLI::App& app, int* exit_code);

}  // namespace tierkv::cli
