// A tiny HTTP/1.0 client for tests of the metrics server, and a reader of the Prometheus text
// format: enough to GET /metrics and /health on 127.0.0.1 and look up one sample.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <sstream>
#include <string>

#include "net_test_util.h"

namespace tierkv::http_test {

struct HttpResponse {
  int status = 0;  // 0: no answer (connection refused, timeout, malformed)
  std::string headers;
  std::string body;
};

// Sends "`method` `path` HTTP/1.0" to 127.0.0.1:port and reads the answer until the server
// closes the connection or `timeout` passes.
inline HttpResponse HttpRequest(int port, const std::string& method, const std::string& path,
                                std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                const std::string& extra_headers = "") {
  HttpResponse out;
  const int fd = test_util::ConnectLoopback(port);
  if (fd < 0) return out;
  const std::string request =
      method + " " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n" + extra_headers + "\r\n";
  if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    close(fd);
    return out;
  }
  std::string raw;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char chunk[4096];
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) break;
    raw.append(chunk, static_cast<size_t>(n));
  }
  close(fd);
  const size_t end = raw.find("\r\n\r\n");
  if (raw.rfind("HTTP/1.", 0) != 0 || end == std::string::npos || raw.size() < 12) return out;
  out.status = std::atoi(raw.c_str() + 9);
  out.headers = raw.substr(0, end);
  out.body = raw.substr(end + 4);
  return out;
}

// A connection to 127.0.0.1:port that sends `partial` (e.g. half a request, or nothing) and
// then stays open, silent, until the caller closes the returned fd (-1 if it cannot connect).
inline int OpenSlowClient(int port, const std::string& partial) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      (!partial.empty() && send(fd, partial.data(), partial.size(), MSG_NOSIGNAL) !=
                               static_cast<ssize_t>(partial.size()))) {
    close(fd);
    return -1;
  }
  return fd;
}

// Whether the server still holds the connection `fd` open (nothing to read, no hang-up).
inline bool StillOpen(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

inline HttpResponse HttpGet(int port, const std::string& path) {
  return HttpRequest(port, "GET", path);
}

// The value of the sample `series` — a metric name with its labels exactly as written, e.g.
// `tierkv_master_objects` or `tierkv_master_rpc_duration_seconds_count{method="Stats"}` — in
// a Prometheus text exposition; nullopt if absent.
inline std::optional<double> Sample(const std::string& text, const std::string& series) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.size() > series.size() && line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
    }
  }
  return std::nullopt;
}

}  // namespace tierkv::http_test
