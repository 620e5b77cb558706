// Scratch directories for the device tests: on the build tree's filesystem
// (ctest runs tests in build/tests), not temp_directory_path(), which may be tmpfs.
#pragma once

#include <gtest/gtest.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>

namespace tierkv::test_util {

inline constexpr uint64_t kTmpfsMagic = 0x01021994;

inline bool IsTmpfs(const std::string& path) {
  struct statfs sfs {};
  return statfs(path.c_str(), &sfs) == 0 && static_cast<uint64_t>(sfs.f_type) == kTmpfsMagic;
}

// The running test's name as one path component ("Name/Param" becomes "Name_Param").
inline std::string TestDirName() {
  std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
  for (char& c : name) c = c == '/' ? '_' : c;
  return name;
}

// A per-test directory under ./tierkv-device-test-<pid>/, removed with its files at
// destruction (the per-process parent only once empty: other tests may use it).
class ScratchDir {
 public:
  ScratchDir()
      : base_(std::filesystem::current_path() / ("tierkv-device-test-" + std::to_string(getpid()))),
        path_(base_ / TestDirName()) {
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
    std::filesystem::remove(base_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }
  bool IsTmpfs() const { return test_util::IsTmpfs(path_.string()); }

 private:
  std::filesystem::path base_;
  std::filesystem::path path_;
};

}  // namespace tierkv::test_util
