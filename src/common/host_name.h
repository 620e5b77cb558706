// The name this process registers under: the host name the config gives, else the system's.
// Thread-safety: stateless.
#pragma once

#include <string>

namespace tierkv {

// local_hostname as Mooncake writes it: "host", "host:port" or "[ipv6]:port" (a bare IPv6
// address, with more than one ':', has no port). `port` is 0 when none is given.
struct HostAndPort {
  std::string host;
  int port = 0;
};
HostAndPort SplitLocalHostname(const std::string& local_hostname);

// The host part of `configured` when not empty (local_hostname, --hostname; a ":port" suffix
// names a port, not the host), else gethostname(); "localhost" when the system has no name to
// give (gethostname failed or returned an empty name).
std::string HostName(const std::string& configured = "");

}  // namespace tierkv
