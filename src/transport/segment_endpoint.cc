#include "transport/segment_endpoint.h"

namespace tierkv {

std::string SegmentEndpointName(const std::string& name, const std::string& socket_path,
                                const std::string& tcp_address) {
  return name + "@" + socket_path + (tcp_address.empty() ? "" : "#" + tcp_address);
}

void SplitSegmentEndpoint(const std::string& mounted, std::string* name, std::string* socket_path,
                          std::string* tcp_address) {
  const size_t at = mounted.find('@');
  *name = at == std::string::npos ? mounted : mounted.substr(0, at);
  const std::string rest = at == std::string::npos ? std::string() : mounted.substr(at + 1);
  const size_t hash = rest.find('#');
  *socket_path = rest.substr(0, hash);
  if (tcp_address != nullptr) {
    *tcp_address = hash == std::string::npos ? std::string() : rest.substr(hash + 1);
  }
}

std::string SegmentHostName(const std::string& name) { return name.substr(0, name.find(':')); }

}  // namespace tierkv
