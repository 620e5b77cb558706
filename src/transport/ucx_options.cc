#include "transport/ucx_options.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <vector>

#include "common/pem_file.h"
#include "transport/device_select.h"
#include "transport/tls_stream.h"

namespace tierkv::transport {
namespace {

// The entries of a sysfs class directory, sorted; empty when it is missing or unreadable.
std::vector<std::string> ListDevices(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (std::filesystem::directory_iterator it(dir, error), end; !error && it != end;
       it.increment(error)) {
    names.push_back(it->path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string Join(const std::vector<std::string>& names) {
  if (names.empty()) return "none";
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out;
}

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

bool PlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of("/:, \t\n") == std::string::npos && name.find('\0') == name.npos;
}

Status ConfigError(const std::string& what) {
  return Status(ErrorCode::INVALID_CONFIG, "ucx transport: " + what);
}

Status Unavailable(const std::string& what) {
  return Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE, "ucx transport: " + what);
}

}  // namespace

Result<UcxTransportSelection> SelectUcxTransports(const UcxTransportOptions& options,
                                                  const std::string& sysfs_root) {
  if (options.io_timeout.count() <= 0) {
    return ConfigError("io_timeout must be positive, got " +
                       std::to_string(options.io_timeout.count()) + " ms");
  }
  if (options.spin.count() < 0 || options.spin > std::chrono::seconds(1)) {
    return ConfigError("spin must be 0..1000000 us, got " + std::to_string(options.spin.count()) +
                       " us");
  }
  const std::filesystem::path root(sysfs_root);
  if (options.protocol == "tcp") {
    if (options.device.empty()) return UcxTransportSelection{"tcp", "all"};
    if (!PlainName(options.device)) {
      return ConfigError("device \"" + options.device +
                         "\" is not a network interface name (protocol \"tcp\" takes one, e.g. "
                         "\"eth0\")");
    }
    const std::filesystem::path dir = root / "class" / "net";
    const std::vector<std::string> interfaces = ListDevices(dir);
    if (!Contains(interfaces, options.device)) {
      return Unavailable("network interface \"" + options.device + "\" (device) not found in " +
                         dir.string() + "; this host has: " + Join(interfaces));
    }
    return UcxTransportSelection{"tcp", options.device};
  }
  if (options.protocol == "rdma") {
    const std::filesystem::path dir = root / "class" / "infiniband";
    const std::vector<std::string> devices = ListDevices(dir);
    if (devices.empty()) {
      return Unavailable("protocol \"rdma\" needs an RDMA (verbs) device and this host has none (" +
                         dir.string() +
                         " is missing or empty: no RDMA NIC, or its driver is not loaded); use "
                         "protocol \"tcp\"");
    }
    if (options.device.empty()) return UcxTransportSelection{"rc,ud", "all"};
    std::string name = options.device;
    std::string port = "1";
    if (const size_t colon = name.find(':'); colon != std::string::npos) {
      port = name.substr(colon + 1);
      name.resize(colon);
    }
    const bool port_ok =
        !port.empty() && port.size() <= 3 &&
        std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!PlainName(name) || !port_ok) {
      return ConfigError("device \"" + options.device +
                         "\" is not a verbs device name (protocol \"rdma\" takes \"mlx5_0\" or "
                         "\"mlx5_0:<port>\")");
    }
    if (!Contains(devices, name)) {
      return Unavailable("verbs device \"" + name + "\" (device) not found in " + dir.string() +
                         "; this host has: " + Join(devices));
    }
    return UcxTransportSelection{"rc,ud", name + ":" + port};
  }
  return ConfigError("protocol \"" + options.protocol + "\" is not one of \"tcp\", \"rdma\"");
}

Result<UcxTransportOptions> UcxOptionsFromConfig(const Config& config) {
  UcxTransportOptions ucx;
  ucx.protocol = config.protocol == "rdma" ? "rdma" : "tcp";
  if (!config.cluster_token_file.empty()) {
    auto tokens = TokenSet::Load(config.cluster_token_file, config.cluster_accept_token_file);
    if (!tokens.ok()) return tokens.status();
    ucx.tokens = std::move(tokens).value();
  }
  if (!config.data_tls_cert_file.empty()) {
    auto cert = ReadPemFile(config.data_tls_cert_file, "config key 'data_tls_cert_file'");
    if (!cert.ok()) return cert.status();
    auto key = ReadPemFile(config.data_tls_key_file, "config key 'data_tls_key_file'");
    if (!key.ok()) return key.status();
    auto server = TlsContext::Server(*cert, *key);
    if (!server.ok()) return server.status();
    ucx.tls_server = std::move(server).value();
  }
  if (!config.data_tls_ca_file.empty()) {
    auto ca = ReadPemFile(config.data_tls_ca_file, "config key 'data_tls_ca_file'");
    if (!ca.ok()) return ca.status();
    auto client = TlsContext::Client(*ca);
    if (!client.ok()) return client.status();
    ucx.tls_client = std::move(client).value();
  }
  // The tcp data plane (tierkv's TCP transport) binds the store's data host only and connects by
  // the kernel's routes: device_name picks the NIC of rdma alone.
  if (ucx.protocol != "rdma") return ucx;
  if (!config.device_name.empty()) {
    auto device = SelectDeviceFromEnv(config.device_name);
    if (!device.ok()) return device.status();
    ucx.device = *device;
  }
  {
    if (auto selected = SelectUcxTransports(ucx); !selected.ok()) {
      return Status(selected.code(),
                    "protocol '" + config.protocol + "': " + selected.status().message());
    }
  }
  return ucx;
}

}  // namespace tierkv::transport
