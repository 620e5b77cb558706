// TransferCounters: the bytes a client has moved between callers' buffers and DRAM segments,
// per transport, since it started. A requester reports them to the master with every heartbeat,
// and the master exports the sums (tierkv_master_transfer_bytes_total, docs/metrics.md): with
// shm, only the requester sees its transfers (it copies through its own mapping).
// Thread-safety: thread-safe (relaxed atomics; a snapshot may mix two concurrent batches).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierkv {

// How bytes reached a segment: this process's own memory, another process's segment mapped on
// this host, or the UCX network transport.
enum class Transport : uint8_t { kLocal = 0, kShm = 1, kTcp = 2, kRdma = 3 };
inline constexpr std::array<std::string_view, 4> kTransportNames = {"local", "shm", "tcp", "rdma"};
inline std::string_view TransportName(Transport t) {
  return kTransportNames[static_cast<size_t>(t)];
}
inline std::optional<Transport> TransportFromName(std::string_view name) {
  for (size_t i = 0; i < kTransportNames.size(); ++i) {
    if (kTransportNames[i] == name) return static_cast<Transport>(i);
  }
  return std::nullopt;
}

// Cumulative bytes of one transport.
struct TransferCount {
  std::string transport;       // a kTransportNames entry
  uint64_t read_bytes = 0;     // segment -> caller (gets)
  uint64_t written_bytes = 0;  // caller -> segment (puts, one per replica written)
};

class TransferCounters {
 public:
  void AddRead(Transport t, uint64_t bytes) {
    read_[static_cast<size_t>(t)].fetch_add(bytes, std::memory_order_relaxed);
  }
  void AddWritten(Transport t, uint64_t bytes) {
    written_[static_cast<size_t>(t)].fetch_add(bytes, std::memory_order_relaxed);
  }
  // The transports that moved any bytes, in kTransportNames order.
  std::vector<TransferCount> Snapshot() const {
    std::vector<TransferCount> out;
    for (size_t i = 0; i < kTransportNames.size(); ++i) {
      const uint64_t r = read_[i].load(std::memory_order_relaxed);
      const uint64_t w = written_[i].load(std::memory_order_relaxed);
      if (r != 0 || w != 0) out.push_back({std::string(kTransportNames[i]), r, w});
    }
    return out;
  }

 private:
  std::array<std::atomic<uint64_t>, kTransportNames.size()> read_{};
  std::array<std::atomic<uint64_t>, kTransportNames.size()> written_{};
};

}  // namespace tierkv
