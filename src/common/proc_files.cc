#include "common/proc_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>

namespace tierkv {

std::string ReadTextFile(const char* path) {
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string out;
  char buf[16384];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

std::optional<uint64_t> SmapsFieldBytes(const void* addr, std::string_view field) {
  const std::string smaps = ReadTextFile("/proc/self/smaps");
  const auto wanted = reinterpret_cast<uintptr_t>(addr);
  bool in_vma = false;
  size_t pos = 0;
  while (pos < smaps.size()) {
    size_t end = smaps.find('\n', pos);
    if (end == std::string::npos) end = smaps.size();
    const std::string line = smaps.substr(pos, end - pos);
    pos = end + 1;
    uintptr_t start = 0;
    uintptr_t stop = 0;
    char dash = 0;
    // VMA header lines read "start-end perms ..."; field lines start with a name.
    if (std::sscanf(line.c_str(), "%" SCNxPTR "%c%" SCNxPTR, &start, &dash, &stop) == 3 &&
        dash == '-') {
      if (in_vma) return std::nullopt;  // left our VMA without the field
      in_vma = start <= wanted && wanted < stop;
      continue;
    }
    if (!in_vma || line.compare(0, field.size(), field) != 0 || line.size() <= field.size() ||
        line[field.size()] != ':') {
      continue;
    }
    uint64_t kib = 0;
    if (std::sscanf(line.c_str() + field.size() + 1, " %" SCNu64, &kib) == 1) return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace tierkv
