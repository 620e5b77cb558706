#include "device/tier_file.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>

namespace tierkv {
namespace {

std::string ErrnoText(int err) { return std::strerror(err); }

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

}  // namespace

Result<TierFile> TierFile::Create(const std::string& path, const TierFileOptions& options) {
  if (Status st = ValidateArguments(path, options.capacity); !st.ok()) return st;

  // Remove what is there. unlink() of a symlink removes the link, never its target.
  struct stat st {};
  if (lstat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return OpenFail(path, "is a directory");
    if (unlink(path.c_str()) != 0 && errno != ENOENT) {
      return OpenFail(path, "cannot remove the existing file: " + ErrnoText(errno));
    }
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
  if (fallocate(file.fd_, 0, 0, static_cast<off_t>(options.capacity)) != 0) {
    err = errno;
    if (err != EOPNOTSUPP) return FallocateError(path, file.fd_, options.capacity, err);
    // No preallocation on this filesystem: size the file sparse, space is not reserved.
    if (ftruncate(file.fd_, static_cast<off_t>(options.capacity)) != 0) {
      return OpenFail(path, "ftruncate: " + ErrnoText(errno));
    }
    spdlog::warn("tier file {}: fallocate unsupported; file is sparse, writes may hit ENOSPC",
                 path);
  }
  file.remove_on_close_ = options.remove_on_close;
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
  if (static_cast<uint64_t>(st.st_size) != options.capacity) {
    return OpenFail(path, "size " + std::to_string(st.st_size) + " bytes, expected " +
                              std::to_string(options.capacity) +
                              " (the configured capacity; was the configuration changed?)");
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
    remove_on_close_ = std::exchange(other.remove_on_close_, true);
    other.path_.clear();
  }
  return *this;
}

void TierFile::Reset() {
  if (fd_ < 0) return;
  if (remove_on_close_) {
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
