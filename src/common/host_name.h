// The name this process registers under: the host name the config gives, else the system's.
// Thread-safety: stateless.
#pragma once

#include <string>

namespace tierkv {

// `configured` when not empty (local_hostname, --hostname), else gethostname(); "localhost"
// when the system has no name to give (gethostname failed or returned an empty name).
std::string HostName(const std::string& configured = "");

}  // namespace tierkv
