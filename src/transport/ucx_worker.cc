#include "transport/ucx_worker.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <utility>

namespace tierkv::transport {
namespace {

using Clock = std::chrono::steady_clock;

// Frees a ucp_config_t on every path.
struct ConfigDeleter {
  void operator()(ucp_config_t* config) const { ucp_config_release(config); }
};

}  // namespace

std::string UcsReason(ucs_status_t status) {
  return std::string(ucs_status_string(status)) + " (UCS status " +
         std::to_string(static_cast<int>(status)) + ")";
}

Result<std::unique_ptr<UcxWorker>> UcxWorker::Create(const UcxTransportOptions& options,
                                                     const std::string& who) {
  Result<UcxTransportSelection> selection = SelectUcxTransports(options);
  if (!selection.ok()) return selection.status();
  auto internal = [&who](const char* call, ucs_status_t status) {
    return Status(ErrorCode::INTERNAL_ERROR, who + ": " + call + ": " + UcsReason(status));
  };

  ucp_config_t* raw_config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &raw_config);
  if (status != UCS_OK) return internal("ucp_config_read", status);
  std::unique_ptr<ucp_config_t, ConfigDeleter> config(raw_config);
  // The protocol decides the transports, whatever UCX_TLS says in the environment; other UCX_*
  // variables still tune UCX.
  status = ucp_config_modify(config.get(), "TLS", selection->transports.c_str());
  if (status != UCS_OK) return internal("ucp_config_modify TLS", status);
  status = ucp_config_modify(config.get(), "NET_DEVICES", selection->net_devices.c_str());
  if (status != UCS_OK) return internal("ucp_config_modify NET_DEVICES", status);
  // Over tcp, one rendezvous per socket: splitting a message across two sockets (UCX's default
  // of two rails, e.g. lo and eth0 towards 127.0.0.1) cost 20-25% of the throughput on a 2-vCPU
  // host, where the CPU, not the wire, is the limit. UCX_MAX_RNDV_RAILS in the environment wins.
  if (selection->transports == "tcp" && std::getenv("UCX_MAX_RNDV_RAILS") == nullptr) {
    status = ucp_config_modify(config.get(), "MAX_RNDV_RAILS", "1");
    if (status != UCS_OK) return internal("ucp_config_modify MAX_RNDV_RAILS", status);
  }

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  params.name = "tierkv";
  ucp_context_h context = nullptr;
  status = ucp_init(&params, config.get(), &context);
  if (status == UCS_ERR_NO_DEVICE || status == UCS_ERR_UNSUPPORTED) {
    return Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE,
                  who + ": UCX has no usable device for protocol \"" + options.protocol +
                      "\" (UCX_TLS=" + selection->transports +
                      ", UCX_NET_DEVICES=" + selection->net_devices + "): " + UcsReason(status));
  }
  if (status != UCS_OK) return internal("ucp_init", status);

  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  ucp_worker_h worker = nullptr;
  status = ucp_worker_create(context, &worker_params, &worker);
  if (status != UCS_OK) {
    ucp_cleanup(context);
    return internal("ucp_worker_create", status);
  }
  int event_fd = -1;
  status = ucp_worker_get_efd(worker, &event_fd);
  if (status != UCS_OK) {
    ucp_worker_destroy(worker);
    ucp_cleanup(context);
    return internal("ucp_worker_get_efd", status);
  }
  return std::unique_ptr<UcxWorker>(
      new UcxWorker(context, worker, event_fd, std::move(selection).value()));
}

UcxWorker::UcxWorker(ucp_context_h context, ucp_worker_h worker, int event_fd,
                     UcxTransportSelection selection)
    : context_(context), worker_(worker), event_fd_(event_fd), selection_(std::move(selection)) {}

UcxWorker::~UcxWorker() {
  ucp_worker_destroy(worker_);
  ucp_cleanup(context_);
}

bool UcxWorker::ProgressAll() {
  bool any = false;
  while (ucp_worker_progress(worker_) != 0) any = true;
  return any;
}

bool UcxWorker::ProgressOrWait(int spin_us, int timeout_ms, int extra_fd) {
  if (ProgressAll()) return true;
  if (spin_us > 0) {
    const auto until = Clock::now() + std::chrono::microseconds(spin_us);
    do {
      if (ProgressAll()) return true;
    } while (Clock::now() < until);
  }
  const ucs_status_t status = ucp_worker_arm(worker_);
  if (status == UCS_ERR_BUSY) return ProgressAll();
  pollfd fds[2] = {{event_fd_, POLLIN, 0}, {extra_fd, POLLIN, 0}};
  const int rc = ::poll(fds, extra_fd >= 0 ? 2 : 1, timeout_ms);
  (void)rc;  // EINTR and timeouts alike: the caller loops and checks its own deadline
  return ProgressAll();
}

ucs_status_t ConnectEndpoint(UcxWorker& worker, const SocketAddress& remote,
                             ucp_err_handler_cb_t on_error, void* arg, ucp_ep_h* ep) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_FLAGS | UCP_EP_PARAM_FIELD_SOCK_ADDR |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.flags = UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
  params.sockaddr.addr = remote.get();
  params.sockaddr.addrlen = remote.length;
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = on_error;
  params.err_handler.arg = arg;
  return ucp_ep_create(worker.get(), &params, ep);
}

ucs_status_t WaitRequest(UcxWorker& worker, ucs_status_ptr_t request, int timeout_ms) {
  if (request == nullptr) return UCS_OK;
  if (UCS_PTR_IS_ERR(request)) return UCS_PTR_STATUS(request);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  ucs_status_t status;
  while ((status = ucp_request_check_status(request)) == UCS_INPROGRESS) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      ucp_request_free(request);  // UCX releases it when it completes
      return UCS_ERR_TIMED_OUT;
    }
    worker.ProgressOrWait(0, static_cast<int>(std::min<int64_t>(left, 100)));
  }
  ucp_request_free(request);
  return status;
}

}  // namespace tierkv::transport
