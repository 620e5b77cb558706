#include "common/host_port.h"

namespace tierkv {

Status CheckHostPort(std::string_view address, std::string_view what) {
  auto bad = [&](const std::string& why) {
    return Status(ErrorCode::INVALID_PARAMS,
                  std::string(what) + ": '" + std::string(address) + "' " + why);
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string_view::npos) return bad("has no port (HOST:PORT expected)");
  const std::string_view host = address.substr(0, colon);
  const std::string_view port = address.substr(colon + 1);
  if (host.empty()) return bad("has no host (HOST:PORT expected)");
  if (host.find(':') != std::string_view::npos &&
      (host.front() != '[' || host.back() != ']' || host.size() < 3)) {
    return bad("has an IPv6 host without brackets ([ADDRESS]:PORT expected)");
  }
  if (port.empty() || port.size() > 5) return bad("has no port in 1..65535");
  unsigned value = 0;
  for (char c : port) {
    if (c < '0' || c > '9') return bad("has a port that is not a decimal number");
    value = value * 10 + static_cast<unsigned>(c - '0');
  }
  if (value < 1 || value > 65535) {
    return bad("has port " + std::string(port) + ", not in 1..65535");
  }
  return Status::Ok();
}

}  // namespace tierkv
