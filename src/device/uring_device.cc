#include "device/uring_device.h"

#include <liburing.h>
#include <sched.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include "common/errno_text.h"
#include "device/posix_device.h"

namespace tierkv {
namespace {

// The kernel caps one read/write below 2 GiB (MAX_RW_COUNT); larger requests are split.
constexpr uint64_t kMaxPiece = uint64_t{1} << 30;
constexpr uint32_t kMaxQueueDepth = 4096;
constexpr uint32_t kMaxRings = 64;
// EAGAIN/EBUSY from submit with nothing in flight to reap: retries before giving up.
constexpr int kMaxBusyRetries = 1000;

// One kernel IO: a request, or a 1 GiB piece of one.
struct Piece {
  size_t request;
  uint64_t offset;
  uint8_t* buf;
  uint32_t len;
};

}  // namespace

struct UringDevice::Ring {
  std::mutex mu;
  // All below guarded by mu.
  io_uring ring{};
  bool live = false;        // false: setup failed or the ring was retired
  uint32_t generation = 0;  // bumped per call; the high half of user_data
};

UringDevice::UringDevice(int fd, uint64_t size, uint64_t alignment, uint32_t queue_depth,
                         uint64_t max_inflight_bytes, uint64_t max_piece)
    : Device(size, alignment),
      fd_(fd),
      queue_depth_(queue_depth),
      max_inflight_bytes_(max_inflight_bytes),
      max_piece_(max_piece) {}

UringDevice::~UringDevice() {
  for (auto& ring : rings_) {
    std::lock_guard<std::mutex> lock(ring->mu);
    if (ring->live) io_uring_queue_exit(&ring->ring);
    ring->live = false;
  }
}

Result<std::unique_ptr<UringDevice>> UringDevice::Open(int fd, uint64_t size, uint64_t alignment,
                                                       const UringDeviceOptions& options) {
  if (fd < 0) return Status(ErrorCode::INVALID_PARAMS, "bad file descriptor " + std::to_string(fd));
  Status status = ValidateGeometry(size, alignment);
  if (!status.ok()) return status;
  if (options.queue_depth == 0 || options.queue_depth > kMaxQueueDepth) {
    return Status(ErrorCode::INVALID_PARAMS, "io_uring queue_depth " +
                                                 std::to_string(options.queue_depth) +
                                                 " outside 1.." + std::to_string(kMaxQueueDepth));
  }
  if (options.num_rings == 0 || options.num_rings > kMaxRings) {
    return Status(ErrorCode::INVALID_PARAMS, "io_uring num_rings " +
                                                 std::to_string(options.num_rings) +
                                                 " outside 1.." + std::to_string(kMaxRings));
  }
  const uint64_t max_piece = options.TEST_max_piece == 0 ? kMaxPiece : options.TEST_max_piece;
  if (max_piece % alignment != 0 || max_piece > kMaxPiece) {
    return Status(ErrorCode::INVALID_PARAMS, "io_uring piece size " + std::to_string(max_piece) +
                                                 " is not a multiple of the alignment up to 1 GiB");
  }
  std::unique_ptr<UringDevice> device(new UringDevice(fd, size, alignment, options.queue_depth,
                                                      options.max_inflight_bytes, max_piece));
  Result<std::unique_ptr<PosixDevice>> fallback = PosixDevice::Open(fd, size, alignment);
  if (!fallback.ok()) return fallback.status();
  device->fallback_ = std::move(fallback).value();
  for (uint32_t i = 0; i < options.num_rings; ++i) {
    auto ring = std::make_unique<Ring>();
    const int ret = options.TEST_fail_setup
                        ? -EPERM
                        : io_uring_queue_init(options.queue_depth, &ring->ring, /*flags=*/0);
    if (ret < 0) {
      // The rings set up so far are torn down by the device's destructor.
      return Status(ErrorCode::INTERNAL_ERROR,
                    "io_uring_queue_init(entries=" + std::to_string(options.queue_depth) +
                        ") failed: " + ErrnoText(-ret) +
                        " (io_uring disabled by sysctl kernel.io_uring_disabled or seccomp, or "
                        "kernel too old?)");
    }
    ring->live = true;
    device->rings_.push_back(std::move(ring));
  }
  return device;
}

Status UringDevice::DoRead(uint64_t offset, void* buf, uint64_t len) {
  return std::move(Run({IoRequest{offset, buf, len}}, /*write=*/false, nullptr)[0]);
}

Status UringDevice::DoWrite(uint64_t offset, const void* buf, uint64_t len) {
  return std::move(
      Run({IoRequest{offset, const_cast<void*>(buf), len}}, /*write=*/true, nullptr)[0]);
}

std::vector<Status> UringDevice::DoReadBatch(const std::vector<IoRequest>& requests,
                                             const IoDone& on_done) {
  return Run(requests, /*write=*/false, on_done);
}

std::vector<Status> UringDevice::DoWriteBatch(const std::vector<IoRequest>& requests,
                                              const IoDone& on_done) {
  return Run(requests, /*write=*/true, on_done);
}

std::vector<Status> UringDevice::Run(const std::vector<IoRequest>& requests, bool write,
                                     const IoDone& on_done) {
  // Take a free ring, starting round-robin; wait on the first one if all are busy.
  const size_t start = next_ring_.fetch_add(1, std::memory_order_relaxed) % rings_.size();
  size_t chosen = start;
  std::unique_lock<std::mutex> lock;
  for (size_t i = 0; i < rings_.size(); ++i) {
    chosen = (start + i) % rings_.size();
    lock = std::unique_lock<std::mutex>(rings_[chosen]->mu, std::try_to_lock);
    if (lock.owns_lock()) break;
  }
  if (!lock.owns_lock()) {
    chosen = start;
    lock = std::unique_lock<std::mutex>(rings_[chosen]->mu);
  }
  Ring& r = *rings_[chosen];
  if (!r.live) {
    lock.unlock();
    return write ? fallback_->WriteBatch(requests, on_done)
                 : fallback_->ReadBatch(requests, on_done);
  }

  std::vector<Piece> pieces;
  pieces.reserve(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    auto* buf = static_cast<uint8_t*>(requests[i].buf);
    for (uint64_t done = 0; done < requests[i].len; done += max_piece_) {
      const uint64_t len = std::min(requests[i].len - done, max_piece_);
      pieces.push_back(Piece{i, requests[i].offset + done, buf + done, static_cast<uint32_t>(len)});
    }
  }
  std::vector<Status> results(requests.size());
  std::vector<bool> completed(pieces.size(), false);
  std::vector<uint32_t> pieces_left(requests.size(), 0);  // per request, for on_done
  for (const Piece& p : pieces) ++pieces_left[p.request];
  const uint64_t generation = ++r.generation;

  size_t next = 0;         // next piece to prepare
  size_t queued = 0;       // prepared, not yet accepted by the kernel
  size_t in_flight = 0;    // accepted, not yet completed
  uint64_t bytes_out = 0;  // of the pieces queued or in flight
  uint64_t peak_out = 0;   // the most bytes_out has been
  auto fail = [&](size_t piece, const std::string& what) {
    const Piece& p = pieces[piece];
    if (results[p.request].ok()) results[p.request] = IoError(write, p.offset, p.len, what);
  };
  std::vector<size_t> done_now;  // requests whose last piece completed in this reap
  // Consumes every ready completion of this call; ignores any stale one of an earlier call.
  auto reap = [&] {
    unsigned head = 0;
    unsigned seen = 0;
    io_uring_cqe* cqe = nullptr;
    io_uring_for_each_cqe(&r.ring, head, cqe) {
      ++seen;
      const uint64_t data = io_uring_cqe_get_data64(cqe);
      const size_t index = static_cast<size_t>(data & 0xffffffffu);
      if ((data >> 32) != (generation & 0xffffffffu) || index >= pieces.size() ||
          completed[index]) {
        continue;
      }
      completed[index] = true;
      --in_flight;
      const Piece& p = pieces[index];
      bytes_out -= p.len;
      if (cqe->res < 0) {
        fail(index, ErrnoText(-cqe->res));
      } else if (static_cast<uint32_t>(cqe->res) != p.len && results[p.request].ok()) {
        results[p.request] = ShortIoError(write, p.offset, static_cast<uint64_t>(cqe->res), p.len);
      }
      if (--pieces_left[p.request] == 0) done_now.push_back(p.request);
    }
    io_uring_cq_advance(&r.ring, seen);
  };
  // Tells on_done of the requests reaped so far. Called after the queue was refilled, so the
  // callbacks (which may take a while: a caller verifies the bytes there) run while the device
  // has new reads in flight; reads complete in bursts, and reporting a burst before the refill
  // left the device idle for all of its callbacks (measured: 15 % of a direct load's rate).
  auto report = [&] {
    if (on_done) {
      for (size_t request : done_now) on_done(request, results[request]);
    }
    done_now.clear();
  };

  std::string ring_error;  // set when the ring itself (not one IO) failed
  int busy_retries = 0;
  while (next < pieces.size() || queued > 0 || in_flight > 0) {
    while (next < pieces.size() && queued + in_flight < queue_depth_ &&
           (queued + in_flight == 0 || max_inflight_bytes_ == 0 ||
            bytes_out + pieces[next].len <= max_inflight_bytes_)) {
      io_uring_sqe* sqe = io_uring_get_sqe(&r.ring);
      if (sqe == nullptr) break;
      const Piece& p = pieces[next];
      bytes_out += p.len;
      peak_out = std::max(peak_out, bytes_out);
      if (write) {
        io_uring_prep_write(sqe, fd_, p.buf, p.len, p.offset);
      } else {
        io_uring_prep_read(sqe, fd_, p.buf, p.len, p.offset);
      }
      io_uring_sqe_set_data64(sqe, ((generation & 0xffffffffu) << 32) | next);
      ++next;
      ++queued;
    }
    if (queued > 0) {
      const int ret = io_uring_submit(&r.ring);
      if (ret > 0) {
        const size_t accepted = std::min(static_cast<size_t>(ret), queued);
        queued -= accepted;
        in_flight += accepted;
        busy_retries = 0;
      } else if (ret == -EINTR) {
        continue;
      } else if (ret == 0 || ret == -EAGAIN || ret == -EBUSY) {
        // Out of kernel resources: reap what is in flight, or wait a little.
        if (in_flight == 0) {
          if (++busy_retries > kMaxBusyRetries) {
            ring_error = "io_uring_submit: " + (ret == 0 ? "accepted nothing" : ErrnoText(-ret));
            break;
          }
          sched_yield();
          continue;
        }
      } else {
        ring_error = "io_uring_submit: " + ErrnoText(-ret);
        break;
      }
    }
    report();
    if (in_flight == 0) continue;
    io_uring_cqe* cqe = nullptr;
    const int ret = io_uring_wait_cqe(&r.ring, &cqe);
    if (ret == -EINTR) continue;
    if (ret < 0) {
      ring_error = "io_uring_wait_cqe: " + ErrnoText(-ret);
      break;
    }
    reap();
  }
  report();  // the last completions (or those reaped before the ring failed)
  if (peak_out > peak_bytes_out_.load()) peak_bytes_out_.store(peak_out);  // racy max: tests only

  if (!ring_error.empty()) {
    // Let the kernel finish with the caller's buffers before returning, then start over on a
    // fresh ring: prepared-but-unsubmitted SQEs must never reach the kernel later.
    while (in_flight > 0) {
      io_uring_cqe* cqe = nullptr;
      const int ret = io_uring_wait_cqe(&r.ring, &cqe);
      if (ret == -EINTR) continue;
      if (ret < 0) break;
      reap();
    }
    report();
    io_uring_queue_exit(&r.ring);
    r.ring = io_uring{};
    const int ret = io_uring_queue_init(queue_depth_, &r.ring, /*flags=*/0);
    if (ret < 0) {
      r.live = false;
      spdlog::error("io_uring ring retired after '{}' (re-init: {}); its calls use pread/pwrite",
                    ring_error, ErrnoText(-ret));
    } else {
      spdlog::warn("io_uring ring re-created after '{}'", ring_error);
    }
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (!completed[i]) fail(i, ring_error.empty() ? "no completion" : ring_error);
  }
  // Requests never completed (the ring failed) are reported by Device::Batch with their
  // final status.
  return results;
}

}  // namespace tierkv
