// TierFile: the file (or raw block device) that backs one path of an SSD tier.
//
// What: Create() makes a fresh tier file at a path. What is already there is replaced only if it
// is a tier file tierkv created (a regular file of this user whose last 4096 bytes hold a valid
// tier file label, below); anything else is refused with an error naming the path and what is
// there: a regular file of other data, a symbolic link (never followed, never removed), a
// directory, a block or character device, a FIFO or a socket. The new file is created with
// O_CREAT|O_EXCL|O_NOFOLLOW|O_RDWR|O_CLOEXEC|O_DIRECT and mode 0600 (fchmod'ed, so the umask can
// neither widen nor narrow it), `capacity` + kLabelBytes bytes are fallocated, and the label is
// written at offset `capacity` (and fdatasync'ed). The tier's data is bytes [0, capacity);
// devices opened on the file (OpenDevice) see exactly that range, so the log never writes the
// label. O_EXCL|O_NOFOLLOW make a symlink or file planted between the unlink and the open an
// error instead of a redirection. A filesystem without O_DIRECT (open answers EINVAL) is an error
// unless allow_buffered_fallback is set: then the file is opened without O_DIRECT (page-cache IO:
// slower writes into a cold cache, double caching of the bytes) and a warning is logged.
// alignment() is 4096 either way, so the callers' rules do not change with the fallback.
//
// Label (4096 bytes at offset `capacity`; docs/disk-format.md, "Tier files"): magic "TKTF",
// version, length, the capacity, the creator's uid, and an xxh3-64 checksum of its fields.
//
// OpenExisting() reopens a tier file kept by an earlier run (warm restart) without creating,
// truncating or following anything: open(O_RDWR|O_NOFOLLOW|O_CLOEXEC|O_DIRECT), then the file
// must be a regular file owned by this user, of mode 0600, exactly `capacity` + kLabelBytes
// bytes, with a valid label for `capacity`, so a planted link, device node or foreign file is
// refused rather than written into.
//
// OpenBlockDevice() opens a raw block device (configured explicitly: offload_block_devices) with
// O_RDWR|O_DIRECT|O_EXCL|O_NOFOLLOW|O_CLOEXEC: O_EXCL makes the kernel refuse a device that is
// mounted or held by another exclusive opener (EBUSY). The capacity is the device's size
// (BLKGETSIZE64) rounded down to 4096; its logical block size must divide 4096. A device is never
// unlinked, whatever remove_on_close says, and carries no label (the whole device is data).
//
// Errors (Create): INVALID_PARAMS for an empty path or a capacity that is not a positive
// multiple of 4096; FILE_OPEN_FAIL naming the path and the errno text otherwise: something that
// is not a tier file of this user is at the path (the message says what), it cannot be removed,
// its directory is missing or not writable, no O_DIRECT, or not enough space (the message gives
// the bytes needed and available).
// Errors (OpenExisting): INVALID_PARAMS as for Create; FILE_OPEN_FAIL naming the path and the
// problem: missing, a symbolic link, not a regular file, owned by another user, a mode other
// than 0600, a size other than `capacity` + kLabelBytes, no valid label (not a tier file, or of
// another capacity), no O_DIRECT (as for Create), or the open's errno.
// Errors (OpenBlockDevice): INVALID_PARAMS for an empty path; FILE_OPEN_FAIL naming the path: a
// symbolic link, not a block device (what it is), in use (EBUSY: mounted?), smaller than 4096
// bytes, a logical block size that does not divide 4096, or the open's / ioctl's errno.
// Ownership: move-only RAII owner of the fd; the destructor closes it and, with
// remove_on_close (the default), unlinks the path if it still names this file (never a device).
// Thread-safety: immutable after Create()/OpenExisting()/OpenBlockDevice() (but for
// set_remove_on_close); the accessors may be called from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "tierkv/status.h"

namespace tierkv {

struct TierFileOptions {
  uint64_t capacity = 0;  // bytes to preallocate: a positive multiple of 4096
  // Open without O_DIRECT (with a warning) where the filesystem has no O_DIRECT.
  bool allow_buffered_fallback = false;
  // Unlink the file when the TierFile is destroyed (warm restart will keep it).
  bool remove_on_close = true;
  // Test hook: behave as if open(O_DIRECT) failed with EINVAL (a filesystem without it).
  bool TEST_pretend_no_direct_io = false;
};

class TierFile {
 public:
  static constexpr uint64_t kAlignment = 4096;
  // The label after a tier file's data.
  static constexpr uint64_t kLabelBytes = 4096;

  static Result<TierFile> Create(const std::string& path, const TierFileOptions& options);
  // Opens the existing tier file at `path` (see above); options.capacity is the data capacity
  // it must have, and options.remove_on_close applies as for Create (callers keeping data pass
  // false).
  static Result<TierFile> OpenExisting(const std::string& path, const TierFileOptions& options);
  // Opens the raw block device at `path` (see above). Never removed.
  static Result<TierFile> OpenBlockDevice(const std::string& path);

  TierFile() = default;  // no file: fd() == -1
  ~TierFile();
  TierFile(TierFile&& other) noexcept;
  TierFile& operator=(TierFile&& other) noexcept;
  TierFile(const TierFile&) = delete;
  TierFile& operator=(const TierFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  uint64_t capacity() const { return capacity_; }
  uint64_t alignment() const { return kAlignment; }
  // False when opened through allow_buffered_fallback.
  bool direct_io() const { return direct_io_; }
  // True for a raw block device (OpenBlockDevice).
  bool block_device() const { return block_device_; }
  bool remove_on_close() const { return remove_on_close_; }
  // Changes what the destructor does (e.g. keep a file once the tier using it opened fine).
  // Not thread-safe: call before sharing the TierFile.
  void set_remove_on_close(bool remove) { remove_on_close_ = remove; }

 private:
  void Reset();

  std::string path_;
  int fd_ = -1;
  uint64_t capacity_ = 0;
  bool direct_io_ = false;
  bool block_device_ = false;
  bool remove_on_close_ = true;
};

}  // namespace tierkv
