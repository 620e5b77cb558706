// Options of the cross-host transport (UcxSegmentServer, UcxSegmentClient) and the check that
// turns them into UCX settings. docs/ucx-transport.md, "Transport selection", is the reference.
// Thread-safety: value types and pure functions (SelectUcxTransports only reads sysfs).
#pragma once

#include <chrono>
#include <string>

#include "common/cluster_token.h"
#include "tierkv/config.h"
#include "tierkv/status.h"

namespace tierkv::transport {

class TlsContext;

struct UcxTransportOptions {
  // Which UCX transports carry the bytes: "tcp" (UCX_TLS=tcp) or "rdma" (UCX_TLS=rc,ud: RC for
  // the data, UD for wire-up; needs a verbs device).
  std::string protocol = "tcp";
  // The NIC, "" for UCX's default (every usable one). For "tcp" a network interface ("eth0");
  // for "rdma" a verbs device ("mlx5_0", meaning port 1, or "mlx5_0:2"), e.g. from
  // SelectDevice (transport/device_select.h).
  std::string device;
  // A requester's call fails with TRANSFER_FAIL, and its connection is closed, once it has
  // waited this long for its server without any reply; a server closes a connection that has not
  // completed its handshake within this time.
  std::chrono::milliseconds io_timeout{10000};
  // How long a thread waiting on UCX keeps polling before it sleeps on the worker's event fd.
  // 0 suits hosts whose cores are shared (measured on a 2-vCPU VM: 50 us cost 20-30% of the
  // throughput, 500 us more than half); a requester or server with a core to itself may trade one
  // for lower latency with ~50 us.
  std::chrono::microseconds spin{0};
  // The cluster credential (common/cluster_token.h): a tcp server accepts only peers that prove
  // an accepted token, a tcp requester proves its own and checks the server's proof. Null = no
  // token: the data port trusts whoever connects (and a requester connects to such a server
  // only without a token of its own).
  std::shared_ptr<const TokenSet> tokens;
  // TLS on the tcp data plane (transport/tls_stream.h): a server's certificate, a requester's
  // CA. Null = plaintext.
  std::shared_ptr<const TlsContext> tls_server;
  std::shared_ptr<const TlsContext> tls_client;
};

// What UCX is told: UCX_TLS and UCX_NET_DEVICES.
struct UcxTransportSelection {
  std::string transports;   // "tcp" or "rc,ud"
  std::string net_devices;  // "all", "eth0", "mlx5_0:1"
};

// Checks `options` against what this host has, reading `sysfs_root` + "/class/net" (tcp) and
// "/class/infiniband" (rdma). Errors: INVALID_CONFIG naming the field for an unknown protocol,
// a malformed device name, a non-positive io_timeout or a spin outside 0..1 s;
// UNAVAILABLE_IN_CURRENT_MODE for "rdma" on a host without verbs devices, or a device this host
// does not have (the message lists the devices it has).
Result<UcxTransportSelection> SelectUcxTransports(const UcxTransportOptions& options,
                                                  const std::string& sysfs_root = "/sys");

// The network transport `config` asks for (protocol rdma -> "rdma", else "tcp"). For rdma,
// device_name goes through SelectDeviceFromEnv and the result is checked with
// SelectUcxTransports; tcp (tierkv's TCP transport) takes no device and needs no check. Errors
// (rdma): as SelectDeviceFromEnv and SelectUcxTransports, the message naming the protocol.
Result<UcxTransportOptions> UcxOptionsFromConfig(const Config& config);

}  // namespace tierkv::transport
