#include "transport/device_select.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tierkv::transport {
namespace {

// Checks that `result` failed with INVALID_CONFIG and a message containing every needle.
::testing::AssertionResult IsInvalid(const Result<std::string>& result,
                                     const std::vector<std::string>& needles) {
  if (result.ok()) return ::testing::AssertionFailure() << "unexpectedly chose " << *result;
  if (result.code() != ErrorCode::INVALID_CONFIG) {
    return ::testing::AssertionFailure() << "wrong code: " << result.status().ToString();
  }
  for (const std::string& needle : needles) {
    if (result.status().message().find(needle) == std::string::npos) {
      return ::testing::AssertionFailure()
             << "message \"" << result.status().message() << "\" lacks \"" << needle << "\"";
    }
  }
  return ::testing::AssertionSuccess();
}

constexpr std::nullopt_t kUnset = std::nullopt;

TEST(SelectDevice, EmptyDeviceNamePinsNoNic) {
  EXPECT_EQ(SelectDevice("", kUnset, 0).value(), "");
  EXPECT_EQ(SelectDevice("", "GPU-1234", 7).value(), "");
  EXPECT_EQ(SelectDevice("", "", -1).value(), "");
}

TEST(SelectDevice, OneEntryServesEveryRank) {
  for (int rank : {0, 1, 7, 100}) {
    EXPECT_EQ(SelectDevice("mlx5_0", kUnset, rank).value(), "mlx5_0");
  }
  // Nothing about the GPUs is needed, so nothing about them can fail.
  EXPECT_EQ(SelectDevice("mlx5_0", "GPU-5f6a", 3).value(), "mlx5_0");
  EXPECT_EQ(SelectDevice("mlx5_0", "", 0).value(), "mlx5_0");
  EXPECT_EQ(SelectDevice("mlx5_0", kUnset, -1).value(), "mlx5_0");
}

TEST(SelectDevice, WithoutCudaVisibleDevicesTheLocalRankIsTheGpuIndex) {
  EXPECT_EQ(SelectDevice("mlx5_0,mlx5_1,mlx5_2", kUnset, 0).value(), "mlx5_0");
  EXPECT_EQ(SelectDevice("mlx5_0,mlx5_1,mlx5_2", kUnset, 1).value(), "mlx5_1");
  EXPECT_EQ(SelectDevice("mlx5_0,mlx5_1,mlx5_2", kUnset, 2).value(), "mlx5_2");
}

TEST(SelectDevice, CudaVisibleDevicesMapsTheLocalRankToThePhysicalGpu) {
  const std::string_view nics = "n0,n1,n2,n3,n4,n5,n6,n7";
  EXPECT_EQ(SelectDevice(nics, "4,5,6,7", 0).value(), "n4");
  EXPECT_EQ(SelectDevice(nics, "4,5,6,7", 3).value(), "n7");
  EXPECT_EQ(SelectDevice(nics, "7,0", 0).value(), "n7");
  EXPECT_EQ(SelectDevice(nics, "7,0", 1).value(), "n0");
  // Entries past the rank's own are not looked at.
  EXPECT_EQ(SelectDevice(nics, "2,GPU-abc", 0).value(), "n2");
}

TEST(SelectDevice, ListShorterThanTheGpuIndexIsAnError) {
  EXPECT_TRUE(IsInvalid(SelectDevice("mlx5_0,mlx5_1", kUnset, 2),
                        {"device_name", "\"mlx5_0,mlx5_1\"", "2 entries", "physical GPU index is 2",
                         "CUDA_VISIBLE_DEVICES is unset"}));
  EXPECT_TRUE(IsInvalid(SelectDevice("mlx5_0,mlx5_1", "0,3", 1),
                        {"device_name", "\"mlx5_0,mlx5_1\"", "physical GPU index is 3",
                         "entry 1 of CUDA_VISIBLE_DEVICES=\"0,3\"", "local rank 1"}));
}

TEST(SelectDevice, EmptyOrBlankEntriesAreErrors) {
  for (std::string_view bad : {",", "a,", ",a", "a,,b", ",,"}) {
    EXPECT_TRUE(IsInvalid(SelectDevice(bad, kUnset, 0), {"device_name", "empty entry"})) << bad;
  }
  EXPECT_TRUE(IsInvalid(SelectDevice("a, b", kUnset, 0), {"device_name", "whitespace", "\" b\""}));
  EXPECT_TRUE(IsInvalid(SelectDevice(" a", kUnset, 0), {"device_name", "whitespace"}));
}

TEST(SelectDevice, NegativeLocalRankIsAnError) {
  EXPECT_TRUE(IsInvalid(SelectDevice("a,b", kUnset, -1), {"device_name", "local rank -1"}));
}

TEST(SelectDevice, CudaVisibleDevicesWithoutTheRanksEntryIsAnError) {
  EXPECT_TRUE(IsInvalid(
      SelectDevice("a,b,c", "0,1", 2),
      {"device_name", "local rank 2 has no entry", "CUDA_VISIBLE_DEVICES=\"0,1\"", "2 entries"}));
  EXPECT_TRUE(IsInvalid(SelectDevice("a,b", "", 0),
                        {"device_name", "CUDA_VISIBLE_DEVICES=\"\"", "hides every GPU"}));
}

TEST(SelectDevice, GpuUuidsAreRefused) {
  EXPECT_TRUE(IsInvalid(
      SelectDevice("a,b", "GPU-8a1f2b3c-0000-1111-2222-333344445555", 0),
      {"device_name", "GPU-8a1f2b3c", "UUID", "integer GPU indices", "single NIC", "entry 0"}));
  EXPECT_TRUE(IsInvalid(SelectDevice("a,b", "0,MIG-1234", 1), {"UUID", "entry 1", "MIG-1234"}));
}

TEST(SelectDevice, NonIntegerGpuEntriesAreRefused) {
  for (std::string_view bad : {"x", "-1", "+1", "1.0", " 1", "1 ", "99999999999", "NoDevFiles"}) {
    EXPECT_TRUE(IsInvalid(SelectDevice("a,b", bad, 0), {"device_name", "is not a GPU index"}))
        << bad;
  }
  EXPECT_TRUE(IsInvalid(SelectDevice("a,b", "0,,1", 1), {"is not a GPU index"}));
}

// Sets or unsets the rank variables for one test and restores them after.
class SelectDeviceEnv : public ::testing::Test {
 protected:
  static constexpr const char* kVariables[] = {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                               "SLURM_LOCALID", "CUDA_VISIBLE_DEVICES"};

  void SetUp() override {
    for (const char* name : kVariables) {
      const char* value = std::getenv(name);
      saved_.push_back(value ? std::optional<std::string>(value) : std::nullopt);
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (size_t i = 0; i < saved_.size(); ++i) {
      if (saved_[i]) {
        ::setenv(kVariables[i], saved_[i]->c_str(), 1);
      } else {
        ::unsetenv(kVariables[i]);
      }
    }
  }

 private:
  std::vector<std::optional<std::string>> saved_;
};

TEST_F(SelectDeviceEnv, LocalRankDefaultsToZero) {
  Result<LocalRank> rank = LocalRankFromEnv();
  ASSERT_TRUE(rank.ok()) << rank.status().ToString();
  EXPECT_EQ(rank->rank, 0);
  EXPECT_EQ(rank->source, "default");
}

TEST_F(SelectDeviceEnv, LocalRankVariablesInOrder) {
  ::setenv("SLURM_LOCALID", "3", 1);
  EXPECT_EQ(LocalRankFromEnv()->rank, 3);
  EXPECT_EQ(LocalRankFromEnv()->source, "SLURM_LOCALID");
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  EXPECT_EQ(LocalRankFromEnv()->rank, 2);
  EXPECT_EQ(LocalRankFromEnv()->source, "OMPI_COMM_WORLD_LOCAL_RANK");
  ::setenv("LOCAL_RANK", "1", 1);
  EXPECT_EQ(LocalRankFromEnv()->rank, 1);
  EXPECT_EQ(LocalRankFromEnv()->source, "LOCAL_RANK");
  // Empty counts as unset.
  ::setenv("LOCAL_RANK", "", 1);
  EXPECT_EQ(LocalRankFromEnv()->source, "OMPI_COMM_WORLD_LOCAL_RANK");
}

TEST_F(SelectDeviceEnv, BadLocalRankIsAnErrorNotSkipped) {
  ::setenv("LOCAL_RANK", "one", 1);
  ::setenv("SLURM_LOCALID", "1", 1);
  Result<LocalRank> rank = LocalRankFromEnv();
  ASSERT_FALSE(rank.ok());
  EXPECT_EQ(rank.code(), ErrorCode::INVALID_CONFIG);
  EXPECT_NE(rank.status().message().find("LOCAL_RANK=\"one\""), std::string::npos)
      << rank.status().message();
  // A list needs the rank; a single NIC does not.
  EXPECT_TRUE(IsInvalid(SelectDeviceFromEnv("a,b"), {"device_name", "LOCAL_RANK=\"one\""}));
  EXPECT_EQ(SelectDeviceFromEnv("a").value(), "a");
  EXPECT_EQ(SelectDeviceFromEnv("").value(), "");
}

TEST_F(SelectDeviceEnv, SelectDeviceFromEnvReadsBothVariables) {
  EXPECT_EQ(SelectDeviceFromEnv("a,b,c,d").value(), "a");
  ::setenv("OMPI_COMM_WORLD_LOCAL_RANK", "1", 1);
  EXPECT_EQ(SelectDeviceFromEnv("a,b,c,d").value(), "b");
  ::setenv("CUDA_VISIBLE_DEVICES", "2,3", 1);
  EXPECT_EQ(SelectDeviceFromEnv("a,b,c,d").value(), "d");
  // Set but empty hides every GPU (CUDA's meaning), unlike unset.
  ::setenv("CUDA_VISIBLE_DEVICES", "", 1);
  EXPECT_TRUE(IsInvalid(SelectDeviceFromEnv("a,b,c,d"), {"hides every GPU"}));
}

TEST_F(SelectDeviceEnv, ErrorsSayWhereTheLocalRankCameFrom) {
  ::setenv("SLURM_LOCALID", "5", 1);
  EXPECT_TRUE(IsInvalid(SelectDeviceFromEnv("a,b"),
                        {"device_name", "physical GPU index is 5", "from SLURM_LOCALID"}));
  ::unsetenv("SLURM_LOCALID");
  ::setenv("CUDA_VISIBLE_DEVICES", "3", 1);
  EXPECT_TRUE(IsInvalid(SelectDeviceFromEnv("a,b"),
                        {"physical GPU index is 3", "LOCAL_RANK", "local rank is 0"}));
  // The list is checked before the rank variables.
  ::setenv("LOCAL_RANK", "bad", 1);
  EXPECT_TRUE(IsInvalid(SelectDeviceFromEnv("a,,b"), {"empty entry"}));
}

}  // namespace
}  // namespace tierkv::transport
