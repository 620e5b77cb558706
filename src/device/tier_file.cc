#include "device/tier_file.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <spdlog/spdlog.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "common/byte_io.h"
#include "common/checksum.h"
#include "common/errno_text.h"

namespace tierkv {
namespace {

// The label: 64 bytes at the start of the last 4096-byte block of a tier file, then zeroes.
constexpr uint32_t kLabelMagic = 0x46544B54;  // "TKTF", little-endian
constexpr uint16_t kLabelVersion = 1;
constexpr uint16_t kLabelLength = 64;

// Fills `block` (kLabelBytes) with the label of a tier file of `capacity` data bytes.
void EncodeLabel(uint8_t* block, uint64_t capacity) {
  std::memset(block, 0, TierFile::kLabelBytes);
  StoreAt<uint32_t>(block, 0, kLabelMagic);
  StoreAt<uint16_t>(block, 4, kLabelVersion);
  StoreAt<uint16_t>(block, 6, kLabelLength);
  StoreAt<uint64_t>(block, 8, capacity);
  StoreAt<uint32_t>(block, 16, static_cast<uint32_t>(geteuid()));
  // 20..55 reserved (zero)
  StoreAt<uint64_t>(block, 56, Checksum(block, 56));
}

// The capacity a label names, or -1 when `block` is no valid label.
int64_t DecodeLabel(const uint8_t* block) {
  if (LoadAt<uint32_t>(block, 0) != kLabelMagic || LoadAt<uint16_t>(block, 4) != kLabelVersion ||
      LoadAt<uint16_t>(block, 6) != kLabelLength ||
      LoadAt<uint64_t>(block, 56) != Checksum(block, 56)) {
    return -1;
  }
  const uint64_t capacity = LoadAt<uint64_t>(block, 8);
  if (capacity == 0 || capacity % TierFile::kAlignment != 0 ||
      capacity > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return -1;
  }
  return static_cast<int64_t>(capacity);
}

// What lstat says is at a path, in words for an error message.
std::string KindOf(const struct stat& st) {
  if (S_ISREG(st.st_mode)) return "a regular file of " + std::to_string(st.st_size) + " bytes";
  if (S_ISDIR(st.st_mode)) return "a directory";
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (S_ISBLK(st.st_mode)) return "a block device";
  if (S_ISCHR(st.st_mode)) return "a character device";
  if (S_ISFIFO(st.st_mode)) return "a FIFO";
  if (S_ISSOCK(st.st_mode)) return "a socket";
  return "a file of an unknown kind";
}

Status OpenFail(const std::string& path, const std::string& what) {
  return Status(ErrorCode::FILE_OPEN_FAIL, "tier file " + path + ": " + what);
}

// Why creating the file failed, in words that point at the fix.
Status CreateError(const std::string& path, int err) {
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return OpenFail(path, "cannot create: its directory does not exist (" + ErrnoText(err) + ")");
    case EACCES:
    case EPERM:
    case EROFS:
      return OpenFail(path, "cannot create: directory not writable (" + ErrnoText(err) + ")");
    case EEXIST:
    case ELOOP:
      return OpenFail(path,
                      "cannot create: the path reappeared after it was removed, another "
                      "process is using it (" +
                          ErrnoText(err) + ")");
    default:
      return OpenFail(path, "cannot create: " + ErrnoText(err));
  }
}

Status FallocateError(const std::string& path, int fd, uint64_t capacity, int err) {
  if (err == ENOSPC) {
    struct statvfs vfs {};
    std::string available = "unknown";
    if (fstatvfs(fd, &vfs) == 0) {
      available = std::to_string(static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize);
    }
    return OpenFail(path, "not enough space: needs " + std::to_string(capacity) + " bytes, " +
                              available + " bytes available (" + ErrnoText(err) + ")");
  }
  if (err == EFBIG) {
    return OpenFail(path, "capacity of " + std::to_string(capacity) +
                              " bytes exceeds the filesystem's largest file (" + ErrnoText(err) +
                              ")");
  }
  return OpenFail(path,
                  "fallocate of " + std::to_string(capacity) + " bytes failed: " + ErrnoText(err));
}

// The argument checks of Create and OpenExisting: INVALID_PARAMS for an empty path or a
// capacity that is not a positive multiple of the alignment.
Status ValidateArguments(const std::string& path, uint64_t capacity) {
  if (path.empty()) return Status(ErrorCode::INVALID_PARAMS, "tier file path is empty");
  if (capacity == 0 || capacity % TierFile::kAlignment != 0 ||
      capacity > static_cast<uint64_t>(std::numeric_limits<off_t>::max())) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "tier file " + path + ": capacity " + std::to_string(capacity) +
                      " is not a positive multiple of " + std::to_string(TierFile::kAlignment));
  }
  return Status::Ok();
}

// A filesystem without O_DIRECT: an error, or (allowed) a warning before buffered IO.
Status NoDirectIo(const std::string& path, bool allow_buffered_fallback) {
  if (!allow_buffered_fallback) {
    return OpenFail(path,
                    "filesystem does not support O_DIRECT (tmpfs?); put the tier on a disk "
                    "filesystem, or set allow_buffered_fallback to use the page cache");
  }
  spdlog::warn(
      "tier file {}: filesystem does not support O_DIRECT; using buffered IO "
      "(allow_buffered_fallback): slower writes and page-cache pressure",
      path);
  return Status::Ok();
}

// The capacity named by the label of the open regular file `fd` (its stat in `st`), or -1 when
// it has none (too small, unreadable, or not a label).
int64_t ReadLabel(int fd, const struct stat& st) {
  if (st.st_size < static_cast<off_t>(TierFile::kLabelBytes) ||
      st.st_size % static_cast<off_t>(TierFile::kAlignment) != 0) {
    return -1;
  }
  void* block = nullptr;
  if (posix_memalign(&block, TierFile::kAlignment, TierFile::kLabelBytes) != 0) return -1;
  const off_t at = st.st_size - static_cast<off_t>(TierFile::kLabelBytes);
  const ssize_t n = pread(fd, block, TierFile::kLabelBytes, at);
  int64_t capacity = -1;
  if (n == static_cast<ssize_t>(TierFile::kLabelBytes)) {
    capacity = DecodeLabel(static_cast<const uint8_t*>(block));
    if (capacity != at) capacity = -1;  // a label of another size: not this file's
  }
  std::free(block);
  return capacity;
}

// OK when what lstat found at `path` (`st`) is a tier file tierkv created, owned by this user:
// Create may replace it. Otherwise FILE_OPEN_FAIL naming the path and what is there.
Status CheckReplaceable(const std::string& path, const struct stat& st) {
  auto refuse = [&path, &st](const std::string& why) {
    return OpenFail(path, "is " + KindOf(st) + why +
                              "; refusing to replace it (remove it yourself, or configure "
                              "another path)");
  };
  if (S_ISLNK(st.st_mode)) {
    char target[4096] = {};
    const ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    return refuse(n > 0 ? " to " + std::string(target, static_cast<size_t>(n)) +
                              " (links are never followed)"
                        : std::string(" (links are never followed)"));
  }
  if (S_ISBLK(st.st_mode)) {
    return refuse(" (to use a raw block device as a tier, set offload_block_devices: true)");
  }
  if (!S_ISREG(st.st_mode)) return refuse("");
  // O_NONBLOCK: a FIFO swapped in after the lstat must not block the open.
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return OpenFail(path, "cannot open to check its label: " + ErrnoText(errno));
  struct stat opened {};
  const bool same = fstat(fd, &opened) == 0 && opened.st_dev == st.st_dev &&
                    opened.st_ino == st.st_ino && S_ISREG(opened.st_mode);
  const int64_t capacity = same ? ReadLabel(fd, opened) : -1;
  close(fd);
  if (!same) return OpenFail(path, "changed while it was checked; refusing to replace it");
  if (capacity < 0) return refuse(" that tierkv did not create (it has no tier file label)");
  if (st.st_uid != geteuid()) {
    return refuse(", a tier file of uid " + std::to_string(st.st_uid) + ", not of this user (uid " +
                  std::to_string(geteuid()) + ")");
  }
  return Status::Ok();
}

}  // namespace

Result<TierFile> TierFile::Create(const std::string& path, const TierFileOptions& options) {
  if (Status st = ValidateArguments(path, options.capacity); !st.ok()) return st;

  // Replace only a tier file of ours; refuse anything else, naming it.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (Status mine = CheckReplaceable(path, st); !mine.ok()) return mine;
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return OpenFail(path, "cannot remove the tier file of an earlier run: " + ErrnoText(errno));
    }
    spdlog::info("tier file {}: replacing the tier file of an earlier run ({} bytes)", path,
                 st.st_size);
  } else if (errno != ENOENT) {
    return OpenFail(path, "cannot look at the path: " + ErrnoText(errno));
  }

  const int flags = O_CREAT | O_EXCL | O_NOFOLLOW | O_RDWR | O_CLOEXEC;
  TierFile file;
  file.path_ = path;
  file.capacity_ = options.capacity;
  file.remove_on_close_ = true;  // until Create succeeds: a failure leaves nothing behind
  file.direct_io_ = true;
  int err = EINVAL;
  if (!options.TEST_pretend_no_direct_io) {
    file.fd_ = open(path.c_str(), flags | O_DIRECT, 0600);
    err = errno;
  }
  if (file.fd_ < 0 && err == EINVAL) {
    // Some kernels create the file before refusing O_DIRECT; remove that empty file (only a
    // regular file: never something another process may have planted).
    if (!options.TEST_pretend_no_direct_io && lstat(path.c_str(), &st) == 0 &&
        S_ISREG(st.st_mode) && st.st_size == 0) {
      unlink(path.c_str());
    }
    if (Status refused = NoDirectIo(path, options.allow_buffered_fallback); !refused.ok()) {
      return refused;
    }
    file.direct_io_ = false;
    file.fd_ = open(path.c_str(), flags, 0600);
    err = errno;
  }
  if (file.fd_ < 0) return CreateError(path, err);

  if (fchmod(file.fd_, 0600) != 0) return OpenFail(path, "fchmod 0600: " + ErrnoText(errno));
  const uint64_t file_size = options.capacity + kLabelBytes;
  if (fallocate(file.fd_, 0, 0, static_cast<off_t>(file_size)) != 0) {
    err = errno;
    if (err != EOPNOTSUPP) return FallocateError(path, file.fd_, file_size, err);
    // No preallocation on this filesystem: size the file sparse, space is not reserved.
    if (ftruncate(file.fd_, static_cast<off_t>(file_size)) != 0) {
      return OpenFail(path, "ftruncate: " + ErrnoText(errno));
    }
    spdlog::warn("tier file {}: fallocate unsupported; file is sparse, writes may hit ENOSPC",
                 path);
  }
  // The label, so that a later run knows this file for a tier file of tierkv's.
  void* block = nullptr;
  if (posix_memalign(&block, kAlignment, kLabelBytes) != 0) {
    return OpenFail(path, "cannot allocate the label's buffer");
  }
  EncodeLabel(static_cast<uint8_t*>(block), options.capacity);
  const ssize_t wrote = pwrite(file.fd_, block, kLabelBytes, static_cast<off_t>(options.capacity));
  err = errno;
  std::free(block);
  if (wrote != static_cast<ssize_t>(kLabelBytes)) {
    return OpenFail(path, "writing the tier file label: " +
                              (wrote < 0 ? ErrnoText(err) : std::string("short write")));
  }
  if (fdatasync(file.fd_) != 0) return OpenFail(path, "fdatasync: " + ErrnoText(errno));
  file.remove_on_close_ = options.remove_on_close;
  return file;
}

Result<TierFile> TierFile::OpenBlockDevice(const std::string& path) {
  if (path.empty()) return Status(ErrorCode::INVALID_PARAMS, "tier device path is empty");
  auto fail = [&path](const std::string& what) {
    return Status(ErrorCode::FILE_OPEN_FAIL, "tier device " + path + ": " + what);
  };
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) return fail("cannot open: " + ErrnoText(errno));
  if (S_ISLNK(st.st_mode)) {
    return fail(
        "is a symbolic link; refusing to follow it (give the device node itself, e.g. "
        "the path `readlink -f` prints)");
  }
  if (!S_ISBLK(st.st_mode)) {
    return fail("is " + KindOf(st) +
                ", not a block device (offload_block_devices: every offload_paths entry must be "
                "a block device)");
  }
  TierFile file;
  file.path_ = path;
  file.block_device_ = true;
  file.remove_on_close_ = false;
  file.direct_io_ = true;
  // O_EXCL on a block device: the kernel refuses it while it is mounted or opened exclusively.
  file.fd_ = open(path.c_str(), O_RDWR | O_DIRECT | O_EXCL | O_NOFOLLOW | O_CLOEXEC);
  if (file.fd_ < 0) {
    const int err = errno;
    if (err == EBUSY) {
      return fail("is in use (mounted, or opened exclusively by another process): " +
                  ErrnoText(err));
    }
    return fail("cannot open with O_DIRECT: " + ErrnoText(err));
  }
  if (fstat(file.fd_, &st) != 0 || !S_ISBLK(st.st_mode)) {
    return fail("is no longer a block device after it was opened");
  }
  uint64_t size = 0;
  if (ioctl(file.fd_, BLKGETSIZE64, &size) != 0) return fail("BLKGETSIZE64: " + ErrnoText(errno));
  int logical = 0;
  if (ioctl(file.fd_, BLKSSZGET, &logical) != 0) return fail("BLKSSZGET: " + ErrnoText(errno));
  if (logical <= 0 || kAlignment % static_cast<uint64_t>(logical) != 0) {
    return fail("logical block size " + std::to_string(logical) + " does not divide " +
                std::to_string(kAlignment));
  }
  file.capacity_ = size / kAlignment * kAlignment;
  if (file.capacity_ == 0) return fail("has " + std::to_string(size) + " bytes, fewer than 4096");
  return file;
}

Result<TierFile> TierFile::OpenExisting(const std::string& path, const TierFileOptions& options) {
  if (Status st = ValidateArguments(path, options.capacity); !st.ok()) return st;
  // Refuse what is not a regular file before opening it: opening a device node or a FIFO can
  // have side effects of its own. The fstat below re-checks the file actually opened.
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    const int err = errno;
    if (err == ENOENT) return OpenFail(path, "cannot open: it does not exist");
    return OpenFail(path, "cannot open: " + ErrnoText(err));
  }
  if (S_ISLNK(st.st_mode)) return OpenFail(path, "is a symbolic link; refusing to follow it");
  if (!S_ISREG(st.st_mode)) return OpenFail(path, "is not a regular file");

  // O_NONBLOCK: a FIFO swapped in after the lstat must not block the open (it is refused below).
  const int flags = O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  TierFile file;
  file.path_ = path;
  file.capacity_ = options.capacity;
  file.remove_on_close_ = false;  // until every check passed: never remove what we refuse
  file.direct_io_ = true;
  int err = EINVAL;
  if (!options.TEST_pretend_no_direct_io) {
    file.fd_ = open(path.c_str(), flags | O_DIRECT);
    err = errno;
  }
  if (file.fd_ < 0 && err == EINVAL) {
    if (Status refused = NoDirectIo(path, options.allow_buffered_fallback); !refused.ok()) {
      return refused;
    }
    file.direct_io_ = false;
    file.fd_ = open(path.c_str(), flags);
    err = errno;
  }
  if (file.fd_ < 0) {
    switch (err) {
      case ELOOP:
        return OpenFail(path, "is a symbolic link; refusing to follow it");
      case ENOENT:
        return OpenFail(path, "cannot open: it does not exist");
      default:
        return OpenFail(path, "cannot open: " + ErrnoText(err));
    }
  }
  if (fstat(file.fd_, &st) != 0) return OpenFail(path, "fstat: " + ErrnoText(errno));
  if (!S_ISREG(st.st_mode)) return OpenFail(path, "is not a regular file");
  if (st.st_uid != geteuid()) {
    return OpenFail(path, "owned by uid " + std::to_string(st.st_uid) + ", not by this user (uid " +
                              std::to_string(geteuid()) + ")");
  }
  if ((st.st_mode & 07777) != 0600) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return OpenFail(path, std::string("mode ") + mode +
                              ", expected 0600 (a tier file is private to the store)");
  }
  if (static_cast<uint64_t>(st.st_size) != options.capacity + kLabelBytes) {
    return OpenFail(path, "size " + std::to_string(st.st_size) + " bytes, expected " +
                              std::to_string(options.capacity + kLabelBytes) +
                              " (the configured capacity and the label; was the configuration "
                              "changed?)");
  }
  if (ReadLabel(file.fd_, st) != static_cast<int64_t>(options.capacity)) {
    return OpenFail(path, "has no valid tier file label for a capacity of " +
                              std::to_string(options.capacity) +
                              " bytes: not a tier file tierkv created (or one of an older format)");
  }
  const int fl = fcntl(file.fd_, F_GETFL);
  if (fl < 0 || fcntl(file.fd_, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    return OpenFail(path, "fcntl: " + ErrnoText(errno));
  }
  file.remove_on_close_ = options.remove_on_close;
  return file;
}

TierFile::~TierFile() { Reset(); }

TierFile::TierFile(TierFile&& other) noexcept { *this = std::move(other); }

TierFile& TierFile::operator=(TierFile&& other) noexcept {
  if (this != &other) {
    Reset();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    capacity_ = std::exchange(other.capacity_, 0);
    direct_io_ = std::exchange(other.direct_io_, false);
    block_device_ = std::exchange(other.block_device_, false);
    remove_on_close_ = std::exchange(other.remove_on_close_, true);
    other.path_.clear();
  }
  return *this;
}

void TierFile::Reset() {
  if (fd_ < 0) return;
  if (remove_on_close_ && !block_device_) {
    // Unlink only if the path still names our file, not one that replaced it.
    struct stat ours {};
    struct stat named {};
    if (fstat(fd_, &ours) == 0 && lstat(path_.c_str(), &named) == 0 &&
        ours.st_dev == named.st_dev && ours.st_ino == named.st_ino) {
      unlink(path_.c_str());
    }
  }
  close(fd_);
  fd_ = -1;
}

}  // namespace tierkv
