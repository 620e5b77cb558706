// TierFile creation safety (symlinks, modes, removal, O_DIRECT fallback, space errors),
// reopening a kept file (OpenExisting refusals), and IoBuffer (alignment, rounding, moves, page
// kind).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "device/device.h"
#include "device/io_buffer.h"
#include "device/tier_file.h"
#include "device_test_util.h"
#include "size_units.h"

namespace tierkv {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kPiB = kMiB * kMiB * 1024;

using test_util::IsTmpfs;

class TierFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    scratch_.emplace();
    dir_ = scratch_->path();
    on_tmpfs_ = scratch_->IsTmpfs();
  }
  void TearDown() override { scratch_.reset(); }

  std::string File(const std::string& name) const { return (dir_ / name).string(); }
  TierFileOptions Options(uint64_t capacity) const {
    TierFileOptions options;
    options.capacity = capacity;
    options.allow_buffered_fallback = on_tmpfs_;
    return options;
  }
  static void WriteText(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  static std::string ReadText(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  std::optional<test_util::ScratchDir> scratch_;
  fs::path dir_;
  bool on_tmpfs_ = false;
};

TEST_F(TierFileTest, CreatesPreallocatedFileWithMode0600EvenWithUmask0) {
  const mode_t old_umask = umask(0);
  Result<TierFile> file = TierFile::Create(File("tier"), Options(4 * kMiB));
  umask(old_umask);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_GE(file->fd(), 0);
  EXPECT_EQ(file->capacity(), 4 * kMiB);
  EXPECT_EQ(file->alignment(), 4096u);
  if (!on_tmpfs_) {
    EXPECT_TRUE(file->direct_io());
  }
  struct stat st {};
  ASSERT_EQ(lstat(File("tier").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), 4 * kMiB + TierFile::kLabelBytes);
  EXPECT_GE(static_cast<uint64_t>(st.st_blocks) * 512, 4 * kMiB);  // really allocated
  const int flags = fcntl(file->fd(), F_GETFL);
  EXPECT_EQ((flags & O_DIRECT) != 0, file->direct_io());
  EXPECT_NE(fcntl(file->fd(), F_GETFD) & FD_CLOEXEC, 0);
}

// Regression (issue 12): Create unlinked whatever was at the path (a file of data, a device
// node, a symlink) and put a tier file there. It now refuses all of them, leaves them as they
// were, and says what is there.
TEST_F(TierFileTest, RefusesASymlinkWithoutFollowingOrRemovingIt) {
  WriteText(File("victim"), "precious bytes");
  ASSERT_EQ(chmod(File("victim").c_str(), 0644), 0);
  ASSERT_EQ(symlink(File("victim").c_str(), File("tier").c_str()), 0);
  Result<TierFile> file = TierFile::Create(File("tier"), Options(kMiB));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(
      file.status().message().find(File("tier") + ": is a symbolic link to " + File("victim")),
      std::string::npos)
      << file.status().message();
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(File("tier"))));
  EXPECT_EQ(ReadText(File("victim")), "precious bytes");
  struct stat st {};
  ASSERT_EQ(stat(File("victim").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  ASSERT_EQ(symlink(File("nowhere").c_str(), File("dangling").c_str()), 0);
  EXPECT_EQ(TierFile::Create(File("dangling"), Options(kMiB)).code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_FALSE(fs::exists(File("nowhere")));  // the link's target was not created
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(File("dangling"))));
}

TEST_F(TierFileTest, RefusesAFileOfDataAndLeavesItAlone) {
  WriteText(File("data"), "someone's data, not a tier file");
  Result<TierFile> file = TierFile::Create(File("data"), Options(kMiB));
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(file.status().message().find(File("data") + ": is a regular file of 31 bytes that "
                                                        "tierkv did not create"),
            std::string::npos)
      << file.status().message();
  EXPECT_EQ(ReadText(File("data")), "someone's data, not a tier file");
  // A large file of zeroes (the size of a tier file, no label) is refused too.
  { std::ofstream(File("zeroes")); }
  ASSERT_EQ(truncate(File("zeroes").c_str(), kMiB + TierFile::kLabelBytes), 0);
  EXPECT_EQ(TierFile::Create(File("zeroes"), Options(kMiB)).code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_EQ(fs::file_size(File("zeroes")), kMiB + TierFile::kLabelBytes);
}

TEST_F(TierFileTest, RefusesADeviceNodeAFifoAndASocketPath) {
  ASSERT_EQ(mkfifo(File("fifo").c_str(), 0600), 0);
  Result<TierFile> fifo = TierFile::Create(File("fifo"), Options(kMiB));
  EXPECT_EQ(fifo.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(fifo.status().message().find("is a FIFO"), std::string::npos)
      << fifo.status().message();
  EXPECT_TRUE(fs::is_fifo(File("fifo")));
  if (geteuid() != 0) GTEST_SKIP() << "making a device node needs root";
  // A block device node (that of /dev/null's numbers would be a character one: use loop0's 7,0).
  ASSERT_EQ(mknod(File("blk").c_str(), S_IFBLK | 0600, makedev(7, 0)), 0);
  Result<TierFile> blk = TierFile::Create(File("blk"), Options(kMiB));
  EXPECT_EQ(blk.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(blk.status().message().find("is a block device"), std::string::npos)
      << blk.status().message();
  EXPECT_NE(blk.status().message().find("offload_block_devices"), std::string::npos);
  EXPECT_TRUE(fs::is_block_file(File("blk")));
  ASSERT_EQ(mknod(File("chr").c_str(), S_IFCHR | 0600, makedev(1, 3)), 0);
  EXPECT_EQ(TierFile::Create(File("chr"), Options(kMiB)).code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_TRUE(fs::is_character_file(File("chr")));
}

TEST_F(TierFileTest, ReplacesATierFileOfAnEarlierRun) {
  TierFileOptions keep = Options(kMiB);
  keep.remove_on_close = false;
  { ASSERT_TRUE(TierFile::Create(File("tier"), keep).ok()); }
  ASSERT_TRUE(fs::exists(File("tier")));
  // Recognised by its label, whatever capacity it had: replaced by one of the new capacity.
  Result<TierFile> again = TierFile::Create(File("tier"), Options(2 * kMiB));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(fs::file_size(File("tier")), 2 * kMiB + TierFile::kLabelBytes);
  EXPECT_EQ(again->capacity(), 2 * kMiB);
}

TEST_F(TierFileTest, RefusesADirectoryAndBadCapacity) {
  fs::create_directory(dir_ / "subdir");
  Result<TierFile> file = TierFile::Create(File("subdir"), Options(kMiB));
  EXPECT_EQ(file.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(file.status().message().find("is a directory"), std::string::npos);
  EXPECT_TRUE(fs::is_directory(dir_ / "subdir"));
  EXPECT_EQ(TierFile::Create(File("a"), Options(0)).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(TierFile::Create(File("a"), Options(1000)).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(TierFile::Create("", Options(kMiB)).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_FALSE(fs::exists(File("a")));
}

TEST_F(TierFileTest, RemovedOnCloseByDefault) {
  {
    Result<TierFile> file = TierFile::Create(File("tier"), Options(kMiB));
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    TierFile moved = std::move(file).value();  // ownership moves with the object
    EXPECT_TRUE(fs::exists(File("tier")));
  }
  EXPECT_FALSE(fs::exists(File("tier")));
}

TEST_F(TierFileTest, KeptWithRemoveOnCloseFalse) {
  TierFileOptions options = Options(kMiB);
  options.remove_on_close = false;
  { ASSERT_TRUE(TierFile::Create(File("tier"), options).ok()); }
  EXPECT_TRUE(fs::exists(File("tier")));
  EXPECT_EQ(fs::file_size(File("tier")), kMiB + TierFile::kLabelBytes);
}

TEST_F(TierFileTest, DoesNotRemoveAFileThatReplacedIt) {
  {
    Result<TierFile> file = TierFile::Create(File("tier"), Options(kMiB));
    ASSERT_TRUE(file.ok());
    ASSERT_EQ(unlink(File("tier").c_str()), 0);
    WriteText(File("tier"), "someone else's");
  }
  EXPECT_EQ(ReadText(File("tier")), "someone else's");
}

TEST_F(TierFileTest, MissingDirectoryIsAClearError) {
  const std::string path = File("no-such-dir/tier");
  Result<TierFile> file = TierFile::Create(path, Options(kMiB));
  EXPECT_EQ(file.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status().message();
  EXPECT_NE(file.status().message().find(std::strerror(ENOENT)), std::string::npos)
      << file.status().message();
}

TEST_F(TierFileTest, NonWritableDirectoryIsAClearError) {
  fs::create_directory(dir_ / "ro");
  ASSERT_EQ(chmod((dir_ / "ro").c_str(), 0555), 0);
  const std::string path = (dir_ / "ro" / "tier").string();
  const TierFileOptions options = Options(kMiB);
  auto check = [&]() -> std::string {  // "" when the error is the expected one
    Result<TierFile> file = TierFile::Create(path, options);
    const std::string& message = file.status().message();
    if (file.code() != ErrorCode::FILE_OPEN_FAIL) return "code: " + file.status().ToString();
    if (message.find(path) == std::string::npos) return "no path: " + message;
    if (message.find(std::strerror(EACCES)) == std::string::npos) return "no errno: " + message;
    return "";
  };
  if (geteuid() != 0) {
    EXPECT_EQ(check(), "");
    return;
  }
  // Root bypasses directory permissions: try as "nobody" in a child process.
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(2);
    _exit(check().empty() ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus));
  if (WEXITSTATUS(wstatus) == 2) GTEST_SKIP() << "cannot drop privileges to test permissions";
  EXPECT_EQ(WEXITSTATUS(wstatus), 0) << "the child saw an unexpected error";
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(TierFileTest, NoODirectIsAnErrorUnlessBufferedFallbackIsAllowed) {
  // Kernels since 6.6 give tmpfs O_DIRECT, so a filesystem without it is simulated.
  TierFileOptions options = Options(kMiB);
  options.allow_buffered_fallback = false;
  options.TEST_pretend_no_direct_io = true;
  Result<TierFile> refused = TierFile::Create(File("tier"), options);
  EXPECT_EQ(refused.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(refused.status().message().find(File("tier") +
                                            ": filesystem does not support O_DIRECT (tmpfs?)"),
            std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(fs::exists(File("tier")));

  options.allow_buffered_fallback = true;
  Result<TierFile> buffered = TierFile::Create(File("tier"), options);
  ASSERT_TRUE(buffered.ok()) << buffered.status().ToString();
  EXPECT_FALSE(buffered->direct_io());
  EXPECT_EQ(fcntl(buffered->fd(), F_GETFL) & O_DIRECT, 0);
  // The Device rules do not change with the fallback.
  Result<std::unique_ptr<Device>> device = OpenDevice(*buffered, DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  Result<IoBuffer> buf = IoBuffer::Allocate(4096);
  ASSERT_TRUE(buf.ok());
  std::memset(buf->data(), 0x5A, 4096);
  ASSERT_TRUE((*device)->Write(8192, buf->data(), 4096).ok());
  std::memset(buf->data(), 0, 4096);
  ASSERT_TRUE((*device)->Read(8192, buf->data(), 4096).ok());
  EXPECT_EQ(buf->data()[4095], 0x5A);
  EXPECT_EQ((*device)->Read(8192 + 512, buf->data(), 4096).code(), ErrorCode::INVALID_PARAMS);
}

TEST_F(TierFileTest, RealTmpfsEitherRefusesODirectClearlyOrSupportsIt) {
  const std::string shm = "/dev/shm";
  if (!fs::is_directory(shm) || !IsTmpfs(shm) || access(shm.c_str(), W_OK) != 0) {
    GTEST_SKIP() << "no writable tmpfs at /dev/shm";
  }
  const std::string path = shm + "/tierkv-device-test-" + std::to_string(getpid());
  TierFileOptions options;
  options.capacity = kMiB;
  Result<TierFile> direct = TierFile::Create(path, options);
  if (!direct.ok()) {
    EXPECT_EQ(direct.code(), ErrorCode::FILE_OPEN_FAIL);
    EXPECT_NE(direct.status().message().find("filesystem does not support O_DIRECT (tmpfs?)"),
              std::string::npos)
        << direct.status().message();
  } else {
    EXPECT_TRUE(direct->direct_io());  // tmpfs with O_DIRECT (Linux 6.6+)
    direct = Result<TierFile>(TierFile());
  }
  options.allow_buffered_fallback = true;
  Result<TierFile> file = TierFile::Create(path, options);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_TRUE(fs::exists(path));
  file = Result<TierFile>(TierFile());
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(TierFileTest, CapacityBeyondTheFilesystemIsAClearError) {
  // 1 PiB: ext4/xfs refuse it up front (EFBIG or ENOSPC) without filling the disk.
  Result<TierFile> file = TierFile::Create(File("tier"), Options(kPiB));
  EXPECT_EQ(file.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(file.status().message().find(File("tier")), std::string::npos)
      << file.status().message();
  EXPECT_NE(file.status().message().find(std::to_string(kPiB + TierFile::kLabelBytes)),
            std::string::npos)
      << file.status().message();
  EXPECT_FALSE(fs::exists(File("tier"))) << "a failed create leaves nothing behind";
}

TEST_F(TierFileTest, NotEnoughSpaceNamesNeededAndAvailableBytes) {
  // tmpfs checks a fallocate against its size limit before allocating anything, so ENOSPC is
  // safe to provoke there; on a disk filesystem it would fill the disk first.
  const std::string shm = "/dev/shm";
  struct statvfs vfs {};
  if (!IsTmpfs(shm) || access(shm.c_str(), W_OK) != 0 || statvfs(shm.c_str(), &vfs) != 0 ||
      vfs.f_blocks == 0) {
    GTEST_SKIP() << "no size-limited writable tmpfs at /dev/shm";
  }
  const std::string path = shm + "/tierkv-device-test-nospc-" + std::to_string(getpid());
  TierFileOptions options;
  options.capacity = kPiB;
  options.allow_buffered_fallback = true;
  Result<TierFile> file = TierFile::Create(path, options);
  EXPECT_EQ(file.code(), ErrorCode::FILE_OPEN_FAIL);
  const std::string& message = file.status().message();
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("not enough space: needs " + std::to_string(kPiB + TierFile::kLabelBytes) +
                         " bytes, "),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("bytes available"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(path));
}

// ---- OpenExisting (warm restart) ----

// A kept tier file of `capacity` bytes whose block 2 holds 0x5A bytes.
void MakeKeptFile(const std::string& path, const TierFileOptions& base, uint64_t capacity) {
  TierFileOptions options = base;
  options.capacity = capacity;
  options.remove_on_close = false;
  Result<TierFile> file = TierFile::Create(path, options);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  Result<std::unique_ptr<Device>> device = OpenDevice(*file, DeviceOptions{});
  ASSERT_TRUE(device.ok()) << device.status().ToString();
  Result<IoBuffer> buf = IoBuffer::Allocate(4096, false);
  ASSERT_TRUE(buf.ok());
  std::memset(buf->data(), 0x5A, 4096);
  ASSERT_TRUE((*device)->Write(8192, buf->data(), 4096).ok());
}

// The error of opening `path` must be FILE_OPEN_FAIL naming the path and `what`.
void ExpectOpenFail(const Result<TierFile>& file, const std::string& path,
                    const std::string& what) {
  EXPECT_EQ(file.code(), ErrorCode::FILE_OPEN_FAIL) << file.status().ToString();
  EXPECT_NE(file.status().message().find(path), std::string::npos) << file.status().message();
  EXPECT_NE(file.status().message().find(what), std::string::npos) << file.status().message();
}

TEST_F(TierFileTest, OpenExistingReopensAKeptFileWithItsBytes) {
  MakeKeptFile(File("tier"), Options(kMiB), kMiB);
  TierFileOptions options = Options(kMiB);
  options.remove_on_close = false;
  {
    Result<TierFile> file = TierFile::OpenExisting(File("tier"), options);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_EQ(file->capacity(), kMiB);
    EXPECT_EQ(file->path(), File("tier"));
    EXPECT_FALSE(file->remove_on_close());
    if (!on_tmpfs_) {
      EXPECT_TRUE(file->direct_io());
    }
    const int flags = fcntl(file->fd(), F_GETFL);
    EXPECT_EQ((flags & O_DIRECT) != 0, file->direct_io());
    EXPECT_EQ(flags & O_NONBLOCK, 0);
    EXPECT_EQ(flags & O_ACCMODE, O_RDWR);
    EXPECT_NE(fcntl(file->fd(), F_GETFD) & FD_CLOEXEC, 0);
    Result<std::unique_ptr<Device>> device = OpenDevice(*file, DeviceOptions{});
    ASSERT_TRUE(device.ok());
    Result<IoBuffer> buf = IoBuffer::Allocate(4096, false);
    ASSERT_TRUE(buf.ok());
    ASSERT_TRUE((*device)->Read(8192, buf->data(), 4096).ok());
    EXPECT_EQ(buf->data()[0], 0x5A);
    EXPECT_EQ(buf->data()[4095], 0x5A);
  }
  EXPECT_TRUE(fs::exists(File("tier"))) << "kept with remove_on_close = false";
  // With remove_on_close (the default) the reopened file goes at close, like a created one.
  options.remove_on_close = true;
  { ASSERT_TRUE(TierFile::OpenExisting(File("tier"), options).ok()); }
  EXPECT_FALSE(fs::exists(File("tier")));
}

TEST_F(TierFileTest, OpenExistingRefusesASymlinkAndLeavesItsTargetAlone) {
  MakeKeptFile(File("target"), Options(kMiB), kMiB);
  ASSERT_EQ(symlink(File("target").c_str(), File("tier").c_str()), 0);
  TierFileOptions options = Options(kMiB);
  ExpectOpenFail(TierFile::OpenExisting(File("tier"), options), File("tier"), "symbolic link");
  EXPECT_TRUE(fs::is_symlink(fs::symlink_status(File("tier"))));  // neither removed
  EXPECT_TRUE(fs::exists(File("target")));                        // nor followed
  EXPECT_EQ(fs::file_size(File("target")), kMiB + TierFile::kLabelBytes);
  ASSERT_EQ(symlink(File("nowhere").c_str(), File("dangling").c_str()), 0);
  ExpectOpenFail(TierFile::OpenExisting(File("dangling"), options), File("dangling"),
                 "symbolic link");
  EXPECT_FALSE(fs::exists(File("nowhere")));
}

TEST_F(TierFileTest, OpenExistingRefusesWhatIsNotARegularFile) {
  const TierFileOptions options = Options(kMiB);
  fs::create_directory(dir_ / "subdir");
  ExpectOpenFail(TierFile::OpenExisting(File("subdir"), options), File("subdir"),
                 "not a regular file");
  ASSERT_EQ(mkfifo(File("fifo").c_str(), 0600), 0);
  ExpectOpenFail(TierFile::OpenExisting(File("fifo"), options), File("fifo"), "not a regular file");
  EXPECT_TRUE(fs::is_fifo(File("fifo")));
  ExpectOpenFail(TierFile::OpenExisting(File("missing"), options), File("missing"),
                 "does not exist");
  EXPECT_FALSE(fs::exists(File("missing"))) << "OpenExisting never creates";
  EXPECT_EQ(TierFile::OpenExisting("", options).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(TierFile::OpenExisting(File("subdir"), Options(1000)).code(),
            ErrorCode::INVALID_PARAMS);
}

TEST_F(TierFileTest, OpenExistingRefusesAnotherModeOrSize) {
  MakeKeptFile(File("tier"), Options(kMiB), kMiB);
  ASSERT_EQ(chmod(File("tier").c_str(), 0644), 0);
  ExpectOpenFail(TierFile::OpenExisting(File("tier"), Options(kMiB)), File("tier"),
                 "mode 0644, expected 0600");
  ASSERT_EQ(chmod(File("tier").c_str(), 0600), 0);
  ExpectOpenFail(TierFile::OpenExisting(File("tier"), Options(2 * kMiB)), File("tier"),
                 "size 1052672 bytes, expected 2101248");
  // Refusals leave the file as it was, even with remove_on_close.
  EXPECT_EQ(fs::file_size(File("tier")), kMiB + TierFile::kLabelBytes);
  ASSERT_TRUE(TierFile::OpenExisting(File("tier"), Options(kMiB)).ok());
}

TEST_F(TierFileTest, OpenExistingRefusesAFileWithoutALabel) {
  // The size a tier file of 1 MiB has, mode 0600, ours: but no label (say, a file of data).
  { std::ofstream(File("tier")); }
  ASSERT_EQ(truncate(File("tier").c_str(), kMiB + TierFile::kLabelBytes), 0);
  ASSERT_EQ(chmod(File("tier").c_str(), 0600), 0);
  ExpectOpenFail(TierFile::OpenExisting(File("tier"), Options(kMiB)), File("tier"),
                 "not a tier file tierkv created");
  EXPECT_EQ(fs::file_size(File("tier")), kMiB + TierFile::kLabelBytes);
}

TEST_F(TierFileTest, OpenExistingRefusesAFileOfAnotherUser) {
  MakeKeptFile(File("tier"), Options(kMiB), kMiB);
  if (geteuid() != 0) GTEST_SKIP() << "changing a file's owner needs root";
  ASSERT_EQ(chown(File("tier").c_str(), 65534, 65534), 0);
  ExpectOpenFail(TierFile::OpenExisting(File("tier"), Options(kMiB)), File("tier"),
                 "owned by uid 65534");
  EXPECT_TRUE(fs::exists(File("tier")));
}

TEST_F(TierFileTest, OpenExistingWithoutODirectNeedsTheBufferedFallback) {
  MakeKeptFile(File("tier"), Options(kMiB), kMiB);
  TierFileOptions options = Options(kMiB);
  options.TEST_pretend_no_direct_io = true;
  options.allow_buffered_fallback = false;
  ExpectOpenFail(TierFile::OpenExisting(File("tier"), options), File("tier"),
                 "filesystem does not support O_DIRECT");
  EXPECT_TRUE(fs::exists(File("tier")));
  options.allow_buffered_fallback = true;
  Result<TierFile> file = TierFile::OpenExisting(File("tier"), options);
  ASSERT_TRUE(file.ok()) << file.status().ToString();
  EXPECT_FALSE(file->direct_io());
  EXPECT_EQ(fcntl(file->fd(), F_GETFL) & O_DIRECT, 0);
}

// ---- IoBuffer ----

TEST(IoBufferTest, HugePageBuffersAreRoundedAndAligned) {
  Result<IoBuffer> one = IoBuffer::Allocate(1);
  ASSERT_TRUE(one.ok()) << one.status().ToString();
  EXPECT_EQ(one->size(), 2 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(one->data()) % (2 * kMiB), 0u);
  Result<IoBuffer> three = IoBuffer::Allocate(3 * kMiB);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(three->size(), 4 * kMiB);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(three->data()) % (2 * kMiB), 0u);
  // Zeroed and writable end to end.
  for (uint64_t i = 0; i < three->size(); i += 4096) ASSERT_EQ(three->data()[i], 0);
  std::memset(three->data(), 0x11, three->size());
}

TEST(IoBufferTest, SmallPageBuffersAreRoundedTo4KiB) {
  Result<IoBuffer> buf = IoBuffer::Allocate(5000, /*want_huge_pages=*/false);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  EXPECT_EQ(buf->size(), 8192u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf->data()) % 4096, 0u);
  EXPECT_EQ(buf->huge_page_bytes(), 0u);
  EXPECT_FALSE(buf->huge_pages());
  EXPECT_STREQ(buf->page_kind(), "4k");
  EXPECT_EQ(IoBuffer::Allocate(0).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(IoBuffer::Allocate(~uint64_t{0}).code(), ErrorCode::INVALID_PARAMS);
}

TEST(IoBufferTest, MoveTransfersOwnership) {
  Result<IoBuffer> made = IoBuffer::Allocate(4096, false);
  ASSERT_TRUE(made.ok());
  IoBuffer a = std::move(made).value();
  uint8_t* data = a.data();
  a.data()[0] = 42;
  IoBuffer b(std::move(a));
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): moved-from state is specified
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), data);
  EXPECT_EQ(b.data()[0], 42);
  Result<IoBuffer> other = IoBuffer::Allocate(8192, false);
  ASSERT_TRUE(other.ok());
  IoBuffer c = std::move(other).value();
  c = std::move(b);  // releases c's old mapping
  EXPECT_EQ(c.data(), data);
  EXPECT_EQ(c.size(), 4096u);
  EXPECT_TRUE(b.empty());  // NOLINT(bugprone-use-after-move)
  IoBuffer empty;
  EXPECT_EQ(empty.data(), nullptr);
}

TEST(IoBufferTest, ReportsThePagesObtained) {
  Result<IoBuffer> buf = IoBuffer::Allocate(8 * kMiB);
  ASSERT_TRUE(buf.ok()) << buf.status().ToString();
  EXPECT_LE(buf->huge_page_bytes(), buf->size());
  EXPECT_EQ(buf->huge_pages(), buf->huge_page_bytes() == buf->size());
  const std::string kind = buf->page_kind();
  EXPECT_TRUE(kind == "thp" || kind == "thp-partial" || kind == "4k") << kind;
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode((std::istreambuf_iterator<char>(thp)), {});
  if (mode.find("[never]") != std::string::npos) {
    EXPECT_EQ(buf->huge_page_bytes(), 0u);
  }
  RecordProperty("page_kind", kind);
  std::printf("IoBuffer 8 MiB: %s (%llu bytes in 2 MiB pages; THP %s)\n", kind.c_str(),
              static_cast<unsigned long long>(buf->huge_page_bytes()), mode.c_str());
}

}  // namespace
}  // namespace tierkv
