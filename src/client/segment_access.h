// SegmentAccess: the bytes of a DRAM segment as the client copies them — this process's own
// MemorySegment (LocalSegmentAccess), or another process's segment mapped or reached through a
// transport (rpc/remote_backend.cc).
//
// A client holds the shared_ptr for the duration of a copy, so the memory stays mapped even
// if the segment is detached (or its owner dies) meanwhile. Thread-safety: immutable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "memory/memory_segment.h"
#include "transfer/transfer_counters.h"

namespace tierkv {

class SegmentAccess {
 public:
  virtual ~SegmentAccess() = default;
  // The bytes, when mapped in this process; null for a segment reached through a network
  // transport (mapped() false): its bytes move with ClientBackend::ReadRemote/WriteRemote.
  virtual uint8_t* base() const = 0;
  virtual bool mapped() const { return true; }
  virtual uint64_t size() const = 0;
  virtual const std::string& name() const = 0;
  // False once the owner is known to be gone: its bytes must not be returned to readers.
  virtual bool alive() const { return true; }
  // How its bytes move: kLocal (this process's memory), kShm, kTcp or kRdma.
  virtual Transport transport() const { return Transport::kLocal; }
};

// A segment of this process, by pointer (kLocal). Holds the segment: its memory stays mapped
// while a copy holds this access, even if the segment was unmounted meanwhile.
class LocalSegmentAccess final : public SegmentAccess {
 public:
  explicit LocalSegmentAccess(std::shared_ptr<MemorySegment> segment)
      : segment_(std::move(segment)) {}
  uint8_t* base() const override { return segment_->base(); }
  uint64_t size() const override { return segment_->size(); }
  const std::string& name() const override { return segment_->name(); }
  const std::shared_ptr<MemorySegment>& segment() const { return segment_; }

 private:
  const std::shared_ptr<MemorySegment> segment_;
};

}  // namespace tierkv
