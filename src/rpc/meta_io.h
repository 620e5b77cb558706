// Whole-buffer reads and writes on a non-blocking socket with a deadline, for the metadata
// channel's two sides (rpc/meta_server.h, rpc/meta_client.h). Thread-safety: stateless.
#pragma once

#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <string>
#include <string_view>

namespace tierkv {

using MetaDeadline = std::chrono::steady_clock::time_point;

enum class MetaIo {
  kOk,
  kClosed,   // the peer closed the connection (or it was shut down here)
  kTimeout,  // the deadline passed first
  kError,    // a socket error; `why` says which
};

// Sends every byte of `parts`, in order (one sendmsg when the socket takes them all).
MetaIo SendAll(int fd, std::initializer_list<std::string_view> parts, MetaDeadline deadline,
               std::string* why);
// Receives exactly `length` bytes into `out`.
MetaIo RecvAll(int fd, void* out, size_t length, MetaDeadline deadline, std::string* why);
// Waits until `fd` is readable (or the peer closed it); kTimeout at the deadline.
MetaIo AwaitReadable(int fd, MetaDeadline deadline, std::string* why);
// "closed by the peer", "timed out", or `why`.
std::string MetaIoText(MetaIo io, const std::string& why);

}  // namespace tierkv
