#include "common/host_name.h"

#include <unistd.h>

namespace tierkv {

HostAndPort SplitLocalHostname(const std::string& local_hostname) {
  HostAndPort out{local_hostname, 0};
  size_t colon = std::string::npos;
  if (!local_hostname.empty() && local_hostname.front() == '[') {
    const size_t close = local_hostname.find(']');
    if (close == std::string::npos) return out;
    out.host = local_hostname.substr(1, close - 1);
    if (close + 1 < local_hostname.size() && local_hostname[close + 1] == ':') colon = close + 1;
  } else {
    colon = local_hostname.find(':');
    if (colon == std::string::npos || local_hostname.find(':', colon + 1) != std::string::npos) {
      return out;  // no port, or a bare IPv6 address
    }
    out.host = local_hostname.substr(0, colon);
  }
  if (colon == std::string::npos) return out;
  const std::string port = local_hostname.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535) {
    return HostAndPort{local_hostname, 0};  // not a port: the whole string names the host
  }
  out.port = std::stoi(port);
  return out;
}

std::string HostName(const std::string& configured) {
  if (!configured.empty()) {
    std::string host = SplitLocalHostname(configured).host;
    if (!host.empty()) return host;
  }
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace tierkv
