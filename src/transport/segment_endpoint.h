// The name a served segment is mounted under carries its endpoints, so the master stays a
// metadata service that knows nothing about transports: "<name>@<socket path>" (the owner's
// ShmSegmentServer), then "#<address>" when it is also served over the network (its
// UcxSegmentServer). Requesters split it to decide how to reach the segment.
// Thread-safety: pure functions.
#pragma once

#include <string>

namespace tierkv {

// "<name>@<socket path>", and "#<tcp address>" when `tcp_address` is not empty.
std::string SegmentEndpointName(const std::string& name, const std::string& socket_path,
                                const std::string& tcp_address = "");
// Splits a mounted name into name, socket path and network address ("" when absent).
void SplitSegmentEndpoint(const std::string& mounted, std::string* name, std::string* socket_path,
                          std::string* tcp_address = nullptr);
// The host part of a segment name "<host>:<pid>:<n>" (everything before the first ':').
std::string SegmentHostName(const std::string& name);

}  // namespace tierkv
