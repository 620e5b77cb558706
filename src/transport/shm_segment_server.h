// Serves a store's DRAM segment to requesters on the same host: each requester connects to a
// per-user Unix socket, asks for the segment by name, and receives its memfd (SCM_RIGHTS) to map;
// a get then becomes one memcpy in the requester. docs/shm-transport.md describes the protocol
// (src/transport/shm_protocol.h encodes it) and the security model.
//
// One thread runs an event loop over the listening socket and every connection, so a slow or
// hostile peer never holds up another: a peer has `handshake_timeout` to send its whole request.
// Peers whose uid (SO_PEERCRED) differs from this process's euid are closed at once and logged.
// After a successful handshake the connection stays open and silent: it is the requester's
// liveness signal, and it ends when Stop() runs or this process dies.
//
// Thread-safety: Start, path, open_connections and Stop may be called from any thread;
// Stop is idempotent. Owns: the socket file (unlinked by Stop if it is still ours), the listening
// socket, every connection, and a reference to the segment.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/unique_fd.h"
#include "memory/memory_segment.h"
#include "tierkv/status.h"

namespace tierkv::transport {

struct ShmSegmentServerOptions {
  // How long a peer may take to send its whole request after connecting.
  std::chrono::milliseconds handshake_timeout{2000};
  // Open connections (handshaking or established) beyond this are closed on accept.
  size_t max_connections = 4096;
};

// Removes the socket files "<prefix><pid>-<n>.sock" in IpcDir() (the names stores give their
// servers) whose process is gone: pid not this process's, kill(pid, 0) answers ESRCH, and
// nobody listens on the socket (a connect is refused: a live server in another pid namespace
// keeps its file). Never removes anything else: another name, a file that is not a socket, a
// socket of a live pid. Returns how many it removed; a missing IpcDir() is 0. Errors:
// FILE_OPEN_FAIL when the directory cannot be listed; failures on single files are logged and
// skipped. Thread-safety: thread-safe (it works on the file system).
Result<size_t> RemoveDeadProcessSockets(const std::string& prefix = "seg-");

class ShmSegmentServer {
 public:
  // Serves `segment` on the socket IpcPath(socket_name). `socket_name` is one path component.
  // Creates the per-user IPC directory if needed; replaces a stale socket file at the path (one
  // nobody listens on) but never any other kind of file. Errors: INVALID_PARAMS (no segment, bad
  // name); INVALID_CONFIG (path of 108 bytes or more, a non-socket file at the path, another
  // server listening there, or EnsureIpcDir's complaints); FILE_OPEN_FAIL (lstat/unlink/bind/
  // chmod failed, with the system's reason); INTERNAL_ERROR (socket/listen/eventfd/thread).
  static Result<std::unique_ptr<ShmSegmentServer>> Start(const std::string& socket_name,
                                                         std::shared_ptr<MemorySegment> segment,
                                                         ShmSegmentServerOptions options = {});
  ~ShmSegmentServer();  // Stop()
  ShmSegmentServer(const ShmSegmentServer&) = delete;
  ShmSegmentServer& operator=(const ShmSegmentServer&) = delete;

  // The socket's absolute path.
  const std::string& path() const { return path_; }

  // Connections currently open (handshaking or established). For tests and metrics.
  size_t open_connections() const { return open_connections_.load(std::memory_order_relaxed); }

  // Stops serving: closes the listener and every connection (requesters see EOF/HUP), joins the
  // thread, and unlinks the socket file unless another server has replaced it. Idempotent.
  void Stop();

 private:
  ShmSegmentServer(std::string path, std::shared_ptr<MemorySegment> segment,
                   ShmSegmentServerOptions options, UniqueFd listener, UniqueFd wake, dev_t dev,
                   ino_t ino);
  void Run();  // the event loop, on thread_

  const std::string path_;
  const std::shared_ptr<MemorySegment> segment_;
  const ShmSegmentServerOptions options_;
  // The socket file's identity, so that Stop unlinks only our own file.
  const dev_t socket_dev_;
  const ino_t socket_ino_;
  UniqueFd listener_;  // used by thread_ only, closed by Stop after the join
  UniqueFd wake_;      // eventfd; Stop writes it to end the loop
  std::atomic<size_t> open_connections_{0};
  std::thread thread_;

  std::mutex stop_mu_;
  bool stopped_ = false;  // guarded by stop_mu_
};

}  // namespace tierkv::transport
