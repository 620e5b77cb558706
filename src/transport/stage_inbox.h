// Where a StageSource's callbacks (on its threads) leave staged ranges for a segment server's
// own thread, which an eventfd wakes. Shared with every callback: one that comes after the
// server stopped (closed) drops its job, releasing what the job holds (the staging space), and
// touches nothing else. Private to src/transport/; thread-safe.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

namespace tierkv::transport {

template <typename Job>
struct StageInbox {
  std::mutex mu;
  std::vector<Job> staged;  // guarded by mu
  int wake_fd = -1;         // guarded by mu; the server's eventfd until closed
  bool closed = false;      // guarded by mu

  void Push(Job job) {
    std::lock_guard<std::mutex> lock(mu);
    if (closed) return;
    staged.push_back(std::move(job));
    const uint64_t one = 1;
    while (::write(wake_fd, &one, sizeof(one)) < 0 && errno == EINTR) {
    }
  }
  std::vector<Job> Take() {
    std::lock_guard<std::mutex> lock(mu);
    return std::exchange(staged, {});
  }
  void Close() {
    std::lock_guard<std::mutex> lock(mu);
    closed = true;
    staged.clear();
  }
};

}  // namespace tierkv::transport
