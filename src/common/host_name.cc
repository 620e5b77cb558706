#include "common/host_name.h"

#include <unistd.h>

namespace tierkv {

std::string HostName(const std::string& configured) {
  if (!configured.empty()) return configured;
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace tierkv
