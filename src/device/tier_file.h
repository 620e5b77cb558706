// TierFile: safe creation of the preallocated file that backs an SSD tier.
//
// What: Create() removes whatever is at the path (a symlink is removed itself, never
// followed; a directory is refused), creates a fresh file with
// O_CREAT|O_EXCL|O_NOFOLLOW|O_RDWR|O_CLOEXEC|O_DIRECT and mode 0600 (fchmod'ed, so the umask
// can neither widen nor narrow it), and fallocates `capacity` bytes. O_EXCL|O_NOFOLLOW make a
// symlink or file planted between the unlink and the open an error instead of a redirection.
// A filesystem without O_DIRECT (open answers EINVAL) is an error unless
// allow_buffered_fallback is set: then the file is opened without O_DIRECT (page-cache IO:
// slower writes into a cold cache, double caching of the bytes) and a warning is logged.
// IO on the file goes through a Device (OpenDevice); alignment() is 4096 either way, so the
// callers' rules do not change with the fallback.
//
// OpenExisting() reopens a tier file kept by an earlier run (warm restart) without creating,
// truncating or following anything: open(O_RDWR|O_NOFOLLOW|O_CLOEXEC|O_DIRECT), then the file
// must be a regular file owned by this user, of mode 0600 and exactly `capacity` bytes, so a
// planted link, device node or foreign file is refused rather than written into.
//
// Errors (Create): INVALID_PARAMS for an empty path or a capacity that is not a positive
// multiple of 4096; FILE_OPEN_FAIL naming the path and the errno text otherwise: the path is
// a directory or cannot be removed, its directory is missing or not writable, no O_DIRECT,
// or not enough space (the message gives the bytes needed and available).
// Errors (OpenExisting): INVALID_PARAMS as for Create; FILE_OPEN_FAIL naming the path and the
// problem: missing, a symbolic link, not a regular file, owned by another user, a mode other
// than 0600, a size other than `capacity`, no O_DIRECT (as for Create), or the open's errno.
// Ownership: move-only RAII owner of the fd; the destructor closes it and, with
// remove_on_close (the default), unlinks the path if it still names this file.
// Thread-safety: immutable after Create()/OpenExisting() (but for set_remove_on_close); the
// accessors may be called from any thread.
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

  static Result<TierFile> Create(const std::string& path, const TierFileOptions& options);
  // Opens the existing tier file at `path` (see above); options.capacity is the size it must
  // have, and options.remove_on_close applies as for Create (callers keeping data pass false).
  static Result<TierFile> OpenExisting(const std::string& path, const TierFileOptions& options);

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
  bool remove_on_close_ = true;
};

}  // namespace tierkv
