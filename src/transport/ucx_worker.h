// What the UCX server and client share: one UCP context with one worker (UcxWorker), request
// bookkeeping; the address helpers come from transport/socket_address.h. Private to
// src/transport/ucx_*.cc and the TCP transport; the only header that includes UCX's.
//
// Thread-safety: a UcxWorker is created in UCS_THREAD_MODE_SERIALIZED: any thread may use it, one
// at a time (the server's progress thread; a client's calls under its mutex). The free functions
// are thread-safe.
#pragma once

#include <sys/socket.h>
#include <ucp/api/ucp.h>

#include <memory>
#include <string>

#include "tierkv/status.h"
#include "transport/socket_address.h"
#include "transport/ucx_options.h"

namespace tierkv::transport {

// "<UCX's status string> (UCS status <n>)".
std::string UcsReason(ucs_status_t status);

// One UCP context (features: active messages and wakeup; transports from the options) and one
// worker on it, with its event descriptor for blocking waits.
class UcxWorker {
 public:
  // `who` prefixes error messages ("ucx segment server"). Errors: SelectUcxTransports'; then
  // UNAVAILABLE_IN_CURRENT_MODE when UCX finds no usable device for the transports (naming
  // them and UCX's reason); INTERNAL_ERROR for any other UCX failure.
  static Result<std::unique_ptr<UcxWorker>> Create(const UcxTransportOptions& options,
                                                   const std::string& who);
  ~UcxWorker();  // destroys the worker, then the context; endpoints must be closed first
  UcxWorker(const UcxWorker&) = delete;
  UcxWorker& operator=(const UcxWorker&) = delete;

  ucp_worker_h get() const { return worker_; }
  const UcxTransportSelection& selection() const { return selection_; }

  // Progresses until UCX reports nothing more to do; true when anything happened.
  bool ProgressAll();
  // Progresses, spinning for up to `spin_us` microseconds while nothing happens, then blocks
  // (ucp_worker_arm + poll) until the worker has events, `extra_fd` (when >= 0) is readable, or
  // `timeout_ms` passes (-1: no limit). Returns whether anything happened before it blocked.
  bool ProgressOrWait(int spin_us, int timeout_ms, int extra_fd = -1);

 private:
  UcxWorker(ucp_context_h context, ucp_worker_h worker, int event_fd,
            UcxTransportSelection selection);

  ucp_context_h context_;
  ucp_worker_h worker_;
  int event_fd_;  // owned by the worker
  const UcxTransportSelection selection_;
};

// Creates a client endpoint of `worker` to the listener at `remote` (UCP's client-server mode),
// with peer error handling: `on_error(arg, ep, status)` runs (inside progress) when the
// connection fails. Returns ucp_ep_create's status; `*ep` is set on UCS_OK.
ucs_status_t ConnectEndpoint(UcxWorker& worker, const SocketAddress& remote,
                             ucp_err_handler_cb_t on_error, void* arg, ucp_ep_h* ep);

// Waits for a UCX request returned by a *_nbx call that had no completion callback, progressing
// `worker` up to `timeout_ms`; frees the request. Returns its status (UCS_OK for nullptr,
// UCS_ERR_TIMED_OUT when it did not finish: the request is then left to UCX, which frees it).
ucs_status_t WaitRequest(UcxWorker& worker, ucs_status_ptr_t request, int timeout_ms);

}  // namespace tierkv::transport
