// SegmentAccess: the bytes of a DRAM segment as a client copies them — this process's own
// MemorySegment, or another process's segment mapped through a transport.
//
// A client holds the shared_ptr for the duration of a copy, so the memory stays mapped even
// if the segment is detached (or its owner dies) meanwhile. Thread-safety: immutable.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace tierkv
