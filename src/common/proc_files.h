// Small readers of kernel text files (/proc, /sys).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tierkv {

// Reads a kernel text file whole; "" when it cannot be opened. Plain read(2),
// not iostreams: ifstream's failure path (e.g. no fds left) trips UBSan's vptr
// check inside libstdc++ 12.
std::string ReadTextFile(const char* path);

// The value, in bytes, of the kB field `field` (e.g. "AnonHugePages") of the
// /proc/self/smaps VMA that contains `addr`; nullopt when unreadable or absent.
std::optional<uint64_t> SmapsFieldBytes(const void* addr, std::string_view field);

}  // namespace tierkv
