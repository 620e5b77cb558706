#include "transport/ipc_path.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tierkv::transport {
namespace {

constexpr const char* kBaseVariable = "TIERKV_IPC_DIR";
constexpr const char* kDefaultBase = "/tmp";

// $TIERKV_IPC_DIR when set and non-empty, else /tmp.
std::string_view Base() {
  const char* base = std::getenv(kBaseVariable);
  return (base != nullptr && *base != '\0') ? std::string_view(base) : kDefaultBase;
}

bool BaseFromEnvironment() {
  const char* base = std::getenv(kBaseVariable);
  return base != nullptr && *base != '\0';
}

std::string OctalMode(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

std::string FileType(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device node";
  return "not a directory";
}

Status Unsafe(const std::string& dir, const std::string& what) {
  return Status(ErrorCode::INVALID_CONFIG, "IPC directory \"" + dir + "\" " + what);
}

Status SystemError(const std::string& dir, const char* call, int error) {
  return Status(ErrorCode::FILE_OPEN_FAIL,
                "IPC directory \"" + dir + "\": " + call + ": " + std::strerror(error));
}

// Closes a descriptor on every return path.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

}  // namespace

std::string IpcDir() {
  std::string_view base = Base();
  while (!base.empty() && base.back() == '/') base.remove_suffix(1);
  return std::string(base) + "/tierkv-" + std::to_string(::geteuid());
}

std::string IpcPath(std::string_view name) {
  std::string path = IpcDir();
  path += '/';
  path += name;
  return path;
}

Status EnsurePrivateDir(const std::string& dir, uid_t owner) {
  bool created = false;
  if (::mkdir(dir.c_str(), 0700) == 0) {
    created = true;
  } else if (errno != EEXIST) {
    return SystemError(dir, "mkdir", errno);
  }
  // lstat for a clear message; the checks that count are on the descriptor, which O_NOFOLLOW
  // keeps from being a symlink swapped in after lstat.
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return SystemError(dir, "lstat", errno);
  if (S_ISLNK(st.st_mode)) {
    return Unsafe(dir, "is a symlink; refusing to follow it (remove it, or set " +
                           std::string(kBaseVariable) + ")");
  }
  if (!S_ISDIR(st.st_mode)) {
    return Unsafe(dir, "exists but is " + FileType(st.st_mode) + ", not a directory (remove it)");
  }
  Fd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ELOOP || errno == ENOTDIR) {
      return Unsafe(dir, "changed while being checked (now a symlink or not a directory)");
    }
    return SystemError(dir, "open", errno);
  }
  if (::fstat(fd.get(), &st) != 0) return SystemError(dir, "fstat", errno);
  if (st.st_uid != owner) {
    return Unsafe(dir, "is owned by uid " + std::to_string(st.st_uid) + ", not uid " +
                           std::to_string(owner) +
                           "; another user's directory is never used for endpoints (remove it, "
                           "or set " +
                           kBaseVariable + ")");
  }
  // A directory made just now gets exactly 0700, whatever the umask took away.
  if (created && (st.st_mode & 07777) != 0700) {
    if (::fchmod(fd.get(), 0700) != 0) return SystemError(dir, "fchmod", errno);
    st.st_mode = (st.st_mode & ~07777) | 0700;
  }
  if ((st.st_mode & 077) != 0) {
    return Unsafe(dir, "has group/other permissions (mode " + OctalMode(st.st_mode) +
                           "); it must be 0700 (chmod 700 it if it is yours)");
  }
  if ((st.st_mode & 07777) != 0700) {
    return Unsafe(dir, "has mode " + OctalMode(st.st_mode) +
                           "; it must be 0700 (chmod 700 it if it is yours)");
  }
  return Status::Ok();
}

Status EnsureIpcDir() {
  const bool from_env = BaseFromEnvironment();
  if (from_env && Base().front() != '/') {
    return Status(
        ErrorCode::INVALID_CONFIG,
        std::string(kBaseVariable) + "=\"" + std::string(Base()) + "\": must be an absolute path");
  }
  Status status = EnsurePrivateDir(IpcDir(), ::geteuid());
  if (status.ok() || !from_env) return status;
  return Status(status.code(),
                status.message() + "; the base directory is from " + std::string(kBaseVariable));
}

}  // namespace tierkv::transport
