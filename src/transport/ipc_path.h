// Per-user paths for same-host IPC endpoints (Unix sockets, shared-memory names) of the
// coming transports.
//
// Every endpoint lives in <base>/tierkv-<euid>/, where <base> is $TIERKV_IPC_DIR when set and
// non-empty, else /tmp. The uid is part of the path even when the base is overridden, so two
// users never share an endpoint. /tmp rather than $XDG_RUNTIME_DIR: processes of one user that
// must meet (a store started by a batch system, a client in an ssh session) do not always see
// the same XDG_RUNTIME_DIR, but they see the same /tmp. docs/configuration.md, "Transport
// selection helpers", documents this.
// Thread-safety: all functions are thread-safe (they read the environment and the file system).
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "tierkv/status.h"

namespace tierkv::transport {

// The per-user directory, "<base>/tierkv-<euid>" (no trailing slash). Does not touch the disk.
std::string IpcDir();

// "<IpcDir()>/<name>". `name` must be a single path component (no '/'). Does not create
// anything: call EnsureIpcDir() before binding. A Unix socket path must stay under 108 bytes,
// which a long TIERKV_IPC_DIR can exceed; the caller that binds checks.
std::string IpcPath(std::string_view name);

// Creates IpcDir() with mode 0700 if missing, then checks it: a real directory (not a symlink),
// owned by this effective uid, with no group/other permissions. Never changes an existing
// directory. Errors: INVALID_CONFIG for a relative TIERKV_IPC_DIR or an unsafe directory (the
// message names the path and says what is wrong); FILE_OPEN_FAIL when the base does not exist or
// mkdir/open fail (with the system's reason).
Status EnsureIpcDir();

// EnsureIpcDir's work on any path: creates `dir` (mode 0700; its parent must exist) if missing,
// then requires a directory, not a symlink, owned by `owner`, mode exactly 0700. Same errors.
Status EnsurePrivateDir(const std::string& dir, uid_t owner);

}  // namespace tierkv::transport
