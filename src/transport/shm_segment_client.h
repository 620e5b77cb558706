// The requester's side of the same-host shared-memory transport: maps a store's DRAM segment,
// received as a memfd from the store's ShmSegmentServer (docs/shm-transport.md), and watches the
// store's liveness through the handshake connection, which stays open for as long as the mapping.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"
#include "tierkv/status.h"

namespace tierkv::transport {

class ShmWaker;
struct ShmLink;

// A store's segment mapped into this process (MAP_SHARED, read-write). The mapping lives as long
// as this object, whatever happens to the store: copies that hold a shared_ptr stay safe after
// the store died, they just read bytes nobody serves any more. Check alive() before trusting the
// bytes. Thread-safety: all methods are thread-safe; the bytes themselves are synchronised by the
// master's allocation protocol, not by this class.
class MappedSegment {
 public:
  ~MappedSegment();  // munmaps; tells the mapper to close the connection if still open
  MappedSegment(const MappedSegment&) = delete;
  MappedSegment& operator=(const MappedSegment&) = delete;

  uint8_t* base() const { return base_; }
  uint64_t size() const { return size_; }
  // The store's page size (2 MiB for huge pages, else 4 KiB).
  uint64_t page_size() const { return page_size_; }
  const std::string& name() const { return name_; }
  const std::string& socket_path() const { return socket_path_; }
  // False once the store's connection hung up or failed (the store stopped or died), or once
  // the mapper that watched it was destroyed. Never becomes true again. Asks the connection
  // itself (one zero-timeout poll) rather than waiting for the watcher thread to notice, so a
  // store that is dead by the time of the call is never reported alive: check it after copying
  // bytes out to know that a live store served them.
  bool alive() const;

 private:
  friend class ShmSegmentMapper;
  MappedSegment(uint8_t* base, uint64_t size, uint64_t page_size, std::string name,
                std::string socket_path, std::shared_ptr<ShmLink> link,
                std::shared_ptr<ShmWaker> waker);

  uint8_t* const base_;
  const uint64_t size_;
  const uint64_t page_size_;
  const std::string name_;
  const std::string socket_path_;
  // The handshake connection, shared with the mapper's watcher: its descriptor stays open for as
  // long as either holds it, so alive() never polls a closed (or reused) descriptor.
  const std::shared_ptr<ShmLink> link_;
  const std::shared_ptr<ShmWaker> waker_;  // the mapper's watcher, poked on destruction
};

// Maps segments served on this host; one per requester process. A watcher thread (started by the
// first successful Map) polls every open handshake connection and marks its segment dead as soon
// as the connection hangs up or errors, then closes it; it also closes the connection of a
// MappedSegment that was destroyed while alive. Thread-safety: Map and watched_connections may be
// called concurrently from any thread. Destroying the mapper stops the watcher, shuts down every
// connection (the store sees it close; the descriptor itself goes with the last of the segment
// and the mapper) and marks every segment it mapped dead (their mappings stay valid).
class ShmSegmentMapper {
 public:
  ShmSegmentMapper() = default;
  ~ShmSegmentMapper();
  ShmSegmentMapper(const ShmSegmentMapper&) = delete;
  ShmSegmentMapper& operator=(const ShmSegmentMapper&) = delete;

  // Connects to the server at `socket_path`, checks that it runs as our euid, asks for
  // `segment_name`, and maps the memfd it sends (MAP_SHARED | MAP_POPULATE, read-write).
  // `timeout` bounds the connect and the handshake, not the mapping. Errors, each naming the
  // path and the system's reason: INVALID_PARAMS (path of 108 bytes or more, empty name or one
  // over 4096 bytes); TRANSFER_FAIL (no server, connect/send/receive failed, timed out, server of
  // another uid, malformed or fd-less reply, the server closed without replying); the server's
  // own code when it refuses (SEGMENT_NOT_FOUND for another name, INVALID_PARAMS for a request it
  // cannot read); INTERNAL_ERROR (mmap, or the watcher thread cannot start).
  Result<std::shared_ptr<MappedSegment>> Map(const std::string& socket_path,
                                             const std::string& segment_name,
                                             std::chrono::milliseconds timeout);

  // Connections being watched now (one per live mapping). For tests and metrics.
  size_t watched_connections() const;

 private:
  struct Watched {
    std::shared_ptr<ShmLink> link;
    std::weak_ptr<MappedSegment> segment;
  };
  Status StartWatcherLocked();  // requires mu_
  void Watch();                 // the watcher loop, on watcher_

  mutable std::mutex mu_;
  // Only the watcher thread (or the destructor, after the join) erases entries: a descriptor being
  // polled is never closed under the poll.
  std::vector<Watched> watched_;     // guarded by mu_
  bool stopping_ = false;            // guarded by mu_
  std::shared_ptr<ShmWaker> waker_;  // guarded by mu_; set with watcher_
  std::thread watcher_;              // started under mu_, joined by the destructor
};

}  // namespace tierkv::transport
