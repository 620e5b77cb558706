// An SSD tier on a raw block device (offload_block_devices, issue 12): a loop device over a file
// in the build folder stands in for an NVMe drive. Needs root and loop support (losetup); the
// tests skip cleanly without them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "device/tier_file.h"
#include "ssd/ssd_tier.h"
#include "tierkv/config.h"

namespace tierkv {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBlockRegion = 1 << 20;
constexpr uint64_t kDeviceBytes = 16 << 20;

std::string Shell(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return out;
  }
  char chunk[256];
  while (fgets(chunk, sizeof(chunk), pipe) != nullptr) out += chunk;
  *status = pclose(pipe);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

class BlockDeviceTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "a loop device needs root";
    image_ = fs::absolute("block-device-tier-test.img").string();
    {
      std::FILE* f = std::fopen(image_.c_str(), "w");
      ASSERT_NE(f, nullptr);
      std::fclose(f);
    }
    ASSERT_EQ(truncate(image_.c_str(), kDeviceBytes), 0);
    int status = 0;
    device_ = Shell("losetup -f --show '" + image_ + "'", &status);
    if (status != 0 || device_.rfind("/dev/", 0) != 0) {
      const std::string why = device_;
      device_.clear();
      GTEST_SKIP() << "no loop device here (losetup: " << why << ")";
    }
  }
  void TearDown() override {
    if (!device_.empty()) {
      int status = 0;
      Shell("losetup -d '" + device_ + "'", &status);
      EXPECT_EQ(status, 0);
    }
    if (!image_.empty()) fs::remove(image_);
  }

  SsdTierOptions Options() const {
    SsdTierOptions o;
    o.paths = {device_};
    o.block_devices = true;
    o.capacity_per_path = 0;  // not used for a device
    o.region_size = kBlockRegion;
    o.want_huge_pages = false;
    o.staging.capacity = 4 << 20;
    o.staging.want_huge_pages = false;
    return o;
  }

  static std::unique_ptr<SsdTier> Open(const SsdTierOptions& o,
                                       std::vector<ScannedRecord>* surviving = nullptr) {
    auto tier = SsdTier::Open(o, nullptr, surviving);
    EXPECT_TRUE(tier.ok()) << tier.status().ToString();
    return tier.ok() ? std::move(tier).value() : nullptr;
  }

  std::string image_;
  std::string device_;
};

TEST_F(BlockDeviceTierTest, TierFileOpensTheDeviceWholeWithODirectAndNeverRemovesIt) {
  {
    Result<TierFile> file = TierFile::OpenBlockDevice(device_);
    ASSERT_TRUE(file.ok()) << file.status().ToString();
    EXPECT_TRUE(file->block_device());
    EXPECT_EQ(file->capacity(), kDeviceBytes);  // from the device's size
    EXPECT_TRUE(file->direct_io());
    EXPECT_NE(fcntl(file->fd(), F_GETFL) & O_DIRECT, 0);
    // Exclusive: a second opener (another store on the same device) is refused.
    Result<TierFile> second = TierFile::OpenBlockDevice(device_);
    EXPECT_EQ(second.code(), ErrorCode::FILE_OPEN_FAIL);
    EXPECT_NE(second.status().message().find("in use"), std::string::npos)
        << second.status().message();
    file->set_remove_on_close(true);  // a device is never unlinked, whatever this says
  }
  EXPECT_TRUE(fs::is_block_file(device_));
  // Without offload_block_devices, the same path is refused rather than replaced.
  TierFileOptions fo;
  fo.capacity = kBlockRegion;
  Result<TierFile> as_file = TierFile::Create(device_, fo);
  EXPECT_EQ(as_file.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(as_file.status().message().find("is a block device"), std::string::npos);
  EXPECT_TRUE(fs::is_block_file(device_));
  // And a regular file is not a block device.
  Result<TierFile> not_device = TierFile::OpenBlockDevice(image_);
  EXPECT_EQ(not_device.code(), ErrorCode::FILE_OPEN_FAIL);
  EXPECT_NE(not_device.status().message().find("not a block device"), std::string::npos)
      << not_device.status().message();
}

TEST_F(BlockDeviceTierTest, StoresStagesAndWarmRestartsOnTheDevice) {
  SsdTierOptions o = Options();
  o.warm_restart = true;
  const std::string value(300 * 1024, 'v');
  DiskLocation location;
  {
    std::vector<ScannedRecord> surviving;
    auto tier = Open(o, &surviving);
    ASSERT_NE(tier, nullptr);
    EXPECT_EQ(tier->capacity(), kDeviceBytes);
    EXPECT_TRUE(surviving.empty()) << "a zeroed device holds no records";
    auto appended = tier->Append("key-1", {ConstPiece{value.data(), value.size()}});
    ASSERT_TRUE(appended.ok()) << appended.status().ToString();
    location = *appended;
    ASSERT_TRUE(tier->Flush().ok());
    auto staged = tier->Stage({StageRequest{"key-1", location, 0, value.size()}});
    ASSERT_TRUE(staged.ok()) << staged.status().ToString();
    ASSERT_TRUE(staged->pieces[0].status.ok()) << staged->pieces[0].status.ToString();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(staged->pieces[0].data), value.size()),
              value);
    EXPECT_TRUE(tier->Release(staged->ticket).ok());
  }
  EXPECT_TRUE(fs::is_block_file(device_));
  {
    std::vector<ScannedRecord> surviving;
    auto tier = Open(o, &surviving);  // warm restart: the record is found again
    ASSERT_NE(tier, nullptr);
    ASSERT_EQ(surviving.size(), 1u);
    EXPECT_EQ(surviving[0].key, "key-1");
    EXPECT_EQ(surviving[0].checksum, Checksum(value.data(), value.size()));
  }
  {
    SsdTierOptions fresh = Options();  // no warm restart: the region headers are cleared
    auto tier = Open(fresh);
    ASSERT_NE(tier, nullptr);
  }
  std::vector<ScannedRecord> surviving;
  auto tier = Open(o, &surviving);
  ASSERT_NE(tier, nullptr);
  EXPECT_TRUE(surviving.empty()) << "a fresh start must not leave records for a later warm restart";
}

TEST(BlockDeviceConfigTest, TheKeyParsesAndLiftsTheCapacityRule) {
  Result<Config> config = ParseConfig(
      R"({"enable_offload": true, "offload_paths": ["/dev/nvme0n1"],
          "offload_block_devices": true, "offload_capacity": 4096})");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_TRUE(config->offload_block_devices);
  Result<Config> files = ParseConfig(
      R"({"enable_offload": true, "offload_paths": ["/mnt/a"], "offload_capacity": 4096})");
  EXPECT_EQ(files.code(), ErrorCode::INVALID_CONFIG);
  EXPECT_FALSE(ParseConfig("{}")->offload_block_devices);
}

}  // namespace
}  // namespace tierkv
