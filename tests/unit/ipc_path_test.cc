#include "transport/ipc_path.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "transport_test_util.h"

namespace tierkv::transport {
namespace {

namespace fs = std::filesystem;
using testing::Refused;

// Gives each test its own scratch base directory and TIERKV_IPC_DIR, restoring both after.
class IpcPathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* saved = std::getenv("TIERKV_IPC_DIR");
    if (saved) saved_ = saved;
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    base_ = fs::temp_directory_path() /
            ("tierkv_ipc_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(base_);
    fs::create_directories(base_);
    ::setenv("TIERKV_IPC_DIR", base_.c_str(), 1);
    dir_ = base_ / ("tierkv-" + std::to_string(::geteuid()));
  }
  void TearDown() override {
    if (saved_) {
      ::setenv("TIERKV_IPC_DIR", saved_->c_str(), 1);
    } else {
      ::unsetenv("TIERKV_IPC_DIR");
    }
    std::error_code ignored;
    fs::remove_all(base_, ignored);
  }

  static mode_t Mode(const fs::path& path) {
    struct stat st;
    EXPECT_EQ(::lstat(path.c_str(), &st), 0);
    return st.st_mode & 07777;
  }

  std::optional<std::string> saved_;
  fs::path base_;
  fs::path dir_;  // the per-user directory under base_
};

TEST_F(IpcPathTest, DefaultBaseIsTmpWithTheUid) {
  ::unsetenv("TIERKV_IPC_DIR");
  const std::string uid = std::to_string(::geteuid());
  EXPECT_EQ(IpcDir(), "/tmp/tierkv-" + uid);
  EXPECT_EQ(IpcPath("store.sock"), "/tmp/tierkv-" + uid + "/store.sock");
  ::setenv("TIERKV_IPC_DIR", "", 1);  // empty counts as unset
  EXPECT_EQ(IpcDir(), "/tmp/tierkv-" + uid);
}

TEST_F(IpcPathTest, OverriddenBaseKeepsTheUid) {
  const std::string uid = std::to_string(::geteuid());
  ::setenv("TIERKV_IPC_DIR", "/run/shared", 1);
  EXPECT_EQ(IpcPath("x"), "/run/shared/tierkv-" + uid + "/x");
  ::setenv("TIERKV_IPC_DIR", "/run/shared///", 1);
  EXPECT_EQ(IpcPath("x"), "/run/shared/tierkv-" + uid + "/x");
  ::setenv("TIERKV_IPC_DIR", "/", 1);
  EXPECT_EQ(IpcDir(), "/tierkv-" + uid);
}

TEST_F(IpcPathTest, CreatesThePrivateDirectoryWithMode0700) {
  const mode_t old_umask = ::umask(0);  // a umask must not widen the mode ...
  ASSERT_TRUE(EnsureIpcDir().ok());
  ::umask(old_umask);
  EXPECT_TRUE(fs::is_directory(fs::symlink_status(dir_)));
  EXPECT_EQ(Mode(dir_), 0700u);
  EXPECT_EQ(IpcPath("a.sock"), (dir_ / "a.sock").string());
  // ... and again, an existing good directory is fine.
  EXPECT_TRUE(EnsureIpcDir().ok());
}

TEST_F(IpcPathTest, RestrictiveUmaskStillGivesAUsableDirectory) {
  const mode_t old_umask = ::umask(0277);  // would leave r-x------
  const Status status = EnsureIpcDir();
  ::umask(old_umask);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(Mode(dir_), 0700u);
}

TEST_F(IpcPathTest, RefusesASymlink) {
  fs::create_directory(base_ / "elsewhere");
  ::chmod((base_ / "elsewhere").c_str(), 0700);
  fs::create_directory_symlink(base_ / "elsewhere", dir_);
  EXPECT_TRUE(Refused(EnsureIpcDir(), ErrorCode::INVALID_CONFIG,
                      {dir_.string(), "symlink", "TIERKV_IPC_DIR"}));
  // A dangling one too.
  fs::remove(dir_);
  fs::create_directory_symlink(base_ / "missing", dir_);
  EXPECT_TRUE(Refused(EnsureIpcDir(), ErrorCode::INVALID_CONFIG, {"symlink"}));
}

TEST_F(IpcPathTest, RefusesANonDirectory) {
  std::ofstream(dir_) << "not a directory";
  EXPECT_TRUE(Refused(EnsureIpcDir(), ErrorCode::INVALID_CONFIG,
                      {dir_.string(), "a regular file", "not a directory"}));
}

TEST_F(IpcPathTest, RefusesGroupOrOtherPermissions) {
  fs::create_directory(dir_);
  for (mode_t mode : {0755, 0770, 0701, 0707, 0710}) {
    ASSERT_EQ(::chmod(dir_.c_str(), mode), 0);
    EXPECT_TRUE(
        Refused(EnsureIpcDir(), ErrorCode::INVALID_CONFIG, {dir_.string(), "group/other", "0700"}))
        << std::oct << mode;
    EXPECT_EQ(Mode(dir_), mode) << "an existing directory is never changed";
  }
  ASSERT_EQ(::chmod(dir_.c_str(), 0500), 0);
  EXPECT_TRUE(Refused(EnsureIpcDir(), ErrorCode::INVALID_CONFIG, {"mode 0500", "must be 0700"}));
  ASSERT_EQ(::chmod(dir_.c_str(), 0700), 0);
  EXPECT_TRUE(EnsureIpcDir().ok());
}

TEST_F(IpcPathTest, RefusesADirectoryOfAnotherUser) {
  // The directory is ours; checking it for another uid stands in for another user's directory
  // (making one would need root).
  ASSERT_TRUE(EnsureIpcDir().ok());
  const uid_t other = ::geteuid() + 1;
  EXPECT_TRUE(Refused(EnsurePrivateDir(dir_.string(), other), ErrorCode::INVALID_CONFIG,
                      {dir_.string(), "owned by uid " + std::to_string(::geteuid()),
                       "not uid " + std::to_string(other)}));
}

TEST_F(IpcPathTest, MissingOrRelativeBaseIsAnError) {
  ::setenv("TIERKV_IPC_DIR", (base_ / "missing").c_str(), 1);
  EXPECT_TRUE(Refused(EnsureIpcDir(), ErrorCode::FILE_OPEN_FAIL,
                      {"missing", "mkdir", "No such file or directory", "TIERKV_IPC_DIR"}));
  ::setenv("TIERKV_IPC_DIR", "relative/dir", 1);
  EXPECT_TRUE(Refused(EnsureIpcDir(), ErrorCode::INVALID_CONFIG,
                      {"TIERKV_IPC_DIR=\"relative/dir\"", "absolute"}));
}

}  // namespace
}  // namespace tierkv::transport
