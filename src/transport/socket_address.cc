#include "transport/socket_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <cstring>

namespace tierkv::transport {

Result<HostPort> ParseHostPort(const std::string& address, bool allow_zero) {
  auto invalid = [&address](const std::string& why) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "ucx address \"" + address + "\": " + why + " (expected host:port, [ipv6]:port)");
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return invalid("no port");
  HostPort out;
  out.host = address.substr(0, colon);
  if (out.host.size() >= 2 && out.host.front() == '[' && out.host.back() == ']') {
    out.host = out.host.substr(1, out.host.size() - 2);
  } else if (out.host.find(':') != std::string::npos) {
    return invalid("an IPv6 host must be in brackets");
  }
  if (out.host.empty()) return invalid("empty host");
  const std::string port = address.substr(colon + 1);
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos) {
    return invalid("port \"" + port + "\" is not a number");
  }
  out.port = std::stoi(port);
  if (out.port > 65535 || (out.port == 0 && !allow_zero)) {
    return invalid("port " + port + " outside " + (allow_zero ? "0" : "1") + "..65535");
  }
  return out;
}

std::string FormatHostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) return "[" + host + "]:" + std::to_string(port);
  return host + ":" + std::to_string(port);
}

Result<SocketAddress> ResolveHost(const std::string& host, int port, bool passive, ErrorCode code) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0) {
    return Status(code, "cannot resolve host \"" + host + "\": " + ::gai_strerror(rc));
  }
  SocketAddress out;
  for (addrinfo* it = found; it != nullptr; it = it->ai_next) {
    if ((it->ai_family == AF_INET || it->ai_family == AF_INET6) &&
        it->ai_addrlen <= sizeof(out.storage)) {
      std::memcpy(&out.storage, it->ai_addr, it->ai_addrlen);
      out.length = it->ai_addrlen;
      break;
    }
  }
  ::freeaddrinfo(found);
  if (out.length == 0) {
    return Status(code, "host \"" + host + "\" has no IPv4 or IPv6 address");
  }
  return out;
}

int PortOf(const sockaddr_storage& address) {
  if (address.ss_family == AF_INET) {
    return ntohs(reinterpret_cast<const sockaddr_in&>(address).sin_port);
  }
  if (address.ss_family == AF_INET6) {
    return ntohs(reinterpret_cast<const sockaddr_in6&>(address).sin6_port);
  }
  return -1;
}

std::string DescribeAddress(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw = nullptr;
  if (address.ss_family == AF_INET) {
    raw = &reinterpret_cast<const sockaddr_in&>(address).sin_addr;
  } else if (address.ss_family == AF_INET6) {
    raw = &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr;
  }
  if (raw == nullptr || ::inet_ntop(address.ss_family, raw, text, sizeof(text)) == nullptr) {
    return "?";
  }
  return FormatHostPort(text, PortOf(address));
}

}  // namespace tierkv::transport
