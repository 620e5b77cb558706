// "host:port" addresses and socket addresses, for every TCP listener and dialer of tierkv (the
// TCP and UCX transports, the master's metadata channel). No UCX here: rpc/ uses it too.
// Thread-safety: pure functions (ResolveHost calls getaddrinfo, which is thread-safe).
#pragma once

#include <sys/socket.h>

#include <string>

#include "tierkv/status.h"

namespace tierkv::transport {

// An address "host:port"; an IPv6 host is written in brackets ("[::1]:5000").
struct HostPort {
  std::string host;
  int port = 0;
};
// INVALID_PARAMS naming `address` when it has no ":port", an empty host, or a port outside
// 0..65535 (`allow_zero`: port 0 means "any free port", for listeners only).
Result<HostPort> ParseHostPort(const std::string& address, bool allow_zero);
std::string FormatHostPort(const std::string& host, int port);

struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
};
// The first address getaddrinfo gives for `host` (`passive`: to listen on). Errors: `code`,
// naming the host and getaddrinfo's reason.
Result<SocketAddress> ResolveHost(const std::string& host, int port, bool passive, ErrorCode code);
// The port of an AF_INET/AF_INET6 address; -1 for other families.
int PortOf(const sockaddr_storage& address);
// The numeric "host:port" of an AF_INET/AF_INET6 address, "?" otherwise.
std::string DescribeAddress(const sockaddr_storage& address);

}  // namespace tierkv::transport
