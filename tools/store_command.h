// `tierkv store`: a standalone store — a process that contributes a DRAM segment to the pool
// of a `tierkv master` and serves it to requesters on this host (shared-memory transport: the
// segment's memfd over a per-user Unix socket). Requesters in mode standalone-store read and
// write through it.
//
// It registers with the master, heartbeats (re-registering and re-mounting after a master
// restart), and runs until SIGINT or SIGTERM, then unmounts and stops. Once serving it prints
// on stdout, flushed: "tierkv store serving segment NAME (BYTES bytes) on master ADDRESS",
// where NAME is the mounted name (what `preferred_segment` may name, with or without the
// "@socket" part); then, unless --metrics-port is -1, "tierkv store metrics on HOST:PORT"
// (Prometheus /metrics and /health). Logs go to stderr.
#pragma once

#include <CLI/CLI.hpp>

namespace tierkv::cli {

// Adds the `store` subcommand to `app`; its exit code goes to *exit_code (0 after a clean
// shutdown, 1 if it could not serve, 2 for bad flag values).
void AddStoreCommand(CLI::App& app, int* exit_code);

}  // namespace tierkv::cli
