#include "tierkv/config.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "size_units.h"

namespace tierkv {
namespace {

constexpr uint64_t kTiB = 1ull << 40;
constexpr uint64_t kMax = std::numeric_limits<uint64_t>::max();

// A standalone-store document that passes validation, for tests that need that mode.
constexpr const char* kStandalonePrefix =
    R"("mode": "standalone-store", "global_segment_size": 0, "master_server_address": "m:1")";

// Checks that `result` failed with INVALID_CONFIG and a message containing every
// needle (usually the key's name).
template <typename T>
::testing::AssertionResult IsInvalid(const Result<T>& result,
                                     const std::vector<std::string>& needles) {
  if (result.ok()) return ::testing::AssertionFailure() << "unexpectedly succeeded";
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

::testing::AssertionResult IsInvalid(const Status& status,
                                     const std::vector<std::string>& needles) {
  Result<int> as_result = status.ok() ? Result<int>(0) : Result<int>(status);
  return IsInvalid(as_result, needles);
}

// Parses `{<body>}`.
Result<Config> ParseBody(const std::string& body) { return ParseConfig("{" + body + "}"); }

// Parses `{"<key>": <value>}`.
// enable_offload needs a tier path, so that key brings one along.
Result<Config> ParseKey(const std::string& key, const std::string& value) {
  const std::string extra =
      key == "enable_offload" ? ", \"offload_paths\": \"/var/tmp/t.tier\"" : "";
  return ParseBody("\"" + key + "\": " + value + extra);
}

void ExpectDefaults(const Config& c) {
  EXPECT_EQ(c.mode, Mode::kEmbedded);
  EXPECT_EQ(c.master_server_address, "");
  EXPECT_EQ(c.metadata_server, "P2PHANDSHAKE");
  EXPECT_EQ(c.local_hostname, "");
  EXPECT_EQ(c.global_segment_size, 1 * kGiB);
  EXPECT_EQ(c.local_buffer_size, 256 * kMiB);
  EXPECT_EQ(c.protocol, "tcp");
  EXPECT_EQ(c.device_name, "");
  EXPECT_FALSE(c.enable_offload);
  EXPECT_EQ(c.default_kv_lease_ttl_ms, 10000u);
  EXPECT_DOUBLE_EQ(c.eviction_high_watermark_ratio, 0.90);
  EXPECT_DOUBLE_EQ(c.eviction_ratio, 0.05);
  EXPECT_EQ(c.put_start_discard_timeout_ms, 30000u);
  EXPECT_EQ(c.metadata_shards, 64u);
  EXPECT_TRUE(c.verify_checksum);
  EXPECT_TRUE(c.require_registered_buffers);
  EXPECT_EQ(c.transfer_threads, 0u);
  EXPECT_TRUE(c.use_huge_pages);
}

// ---------------------------------------------------------------- defaults

TEST(ConfigDefaultsTest, DefaultConfigIsValid) {
  Config config;
  ExpectDefaults(config);
  EXPECT_TRUE(ValidateConfig(config).ok());
}

TEST(ConfigDefaultsTest, EmptyObjectGivesDefaults) {
  Result<Config> config = ParseConfig("{}");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ExpectDefaults(*config);
}

TEST(ConfigDefaultsTest, WhitespaceAroundDocumentIsFine) {
  Result<Config> config = ParseConfig("\n  { }  \n");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ExpectDefaults(*config);
}

TEST(ConfigDefaultsTest, ModeName) {
  EXPECT_EQ(ModeName(Mode::kEmbedded), "embedded");
  EXPECT_EQ(ModeName(Mode::kStandaloneStore), "standalone-store");
  EXPECT_EQ(ModeName(static_cast<Mode>(42)), "unknown");
}

// ---------------------------------------------------------------- every key

TEST(ConfigParseTest, AllKeysParsed) {
  Result<Config> config = ParseConfig(R"({
    "mode": "standalone-store",
    "master_server_address": "10.0.0.1:50051",
    "metadata_server": "etcd://10.0.0.2:2379",
    "local_hostname": "node-7",
    "global_segment_size": 0,
    "local_buffer_size": "512MiB",
    "protocol": "rdma",
    "device_name": "mlx5_0,mlx5_1",
    "enable_offload": true,
    "default_kv_lease_ttl_ms": 5000,
    "eviction_high_watermark_ratio": 0.8,
    "eviction_ratio": 0.1,
    "put_start_discard_timeout_ms": 60000,
    "metadata_shards": 128,
    "verify_checksum": false,
    "require_registered_buffers": "FALSE",
    "transfer_threads": 8,
    "use_huge_pages": "false",
    "offload_paths": ["/mnt/a/t.tier", "/mnt/b/t.tier"],
    "offload_capacity": "2GB",
    "offload_region_size": "32MiB",
    "offload_eviction_policy": "lru",
    "offload_write_policy": "write_behind",
    "offload_io_engine": "posix",
    "offload_warm_restart": true,
    "offload_page_cache_reads": true,
    "offload_allow_buffered_io": true,
    "staging_buffer_size": "64MiB",
    "staging_usable_ratio": 0.5,
    "staging_ttl_ms": 1000,
    "promote_on_hit": true,
    "promote_min_hits": 3
  })");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->mode, Mode::kStandaloneStore);
  EXPECT_EQ(config->master_server_address, "10.0.0.1:50051");
  EXPECT_EQ(config->metadata_server, "etcd://10.0.0.2:2379");
  EXPECT_EQ(config->local_hostname, "node-7");
  EXPECT_EQ(config->global_segment_size, 0u);
  EXPECT_EQ(config->local_buffer_size, 512 * kMiB);
  EXPECT_EQ(config->protocol, "rdma");
  EXPECT_EQ(config->device_name, "mlx5_0,mlx5_1");
  EXPECT_TRUE(config->enable_offload);
  EXPECT_EQ(config->default_kv_lease_ttl_ms, 5000u);
  EXPECT_DOUBLE_EQ(config->eviction_high_watermark_ratio, 0.8);
  EXPECT_DOUBLE_EQ(config->eviction_ratio, 0.1);
  EXPECT_EQ(config->put_start_discard_timeout_ms, 60000u);
  EXPECT_EQ(config->metadata_shards, 128u);
  EXPECT_FALSE(config->verify_checksum);
  EXPECT_FALSE(config->require_registered_buffers);
  EXPECT_EQ(config->transfer_threads, 8u);
  EXPECT_FALSE(config->use_huge_pages);
  EXPECT_EQ(config->offload_paths, (std::vector<std::string>{"/mnt/a/t.tier", "/mnt/b/t.tier"}));
  EXPECT_EQ(config->offload_capacity, 2 * kGiB);
  EXPECT_EQ(config->offload_region_size, 32 * kMiB);
  EXPECT_EQ(config->offload_eviction_policy, "lru");
  EXPECT_EQ(config->offload_write_policy, "write_behind");
  EXPECT_EQ(config->offload_io_engine, "posix");
  EXPECT_TRUE(config->offload_warm_restart);
  EXPECT_TRUE(config->offload_page_cache_reads);
  EXPECT_TRUE(config->offload_allow_buffered_io);
  EXPECT_EQ(config->staging_buffer_size, 64 * kMiB);
  EXPECT_DOUBLE_EQ(config->staging_usable_ratio, 0.5);
  EXPECT_EQ(config->staging_ttl_ms, 1000u);
  EXPECT_TRUE(config->promote_on_hit);
  EXPECT_EQ(config->promote_min_hits, 3u);
}

TEST(ConfigOffloadTest, OffloadDefaultsAndRules) {
  Config c;
  EXPECT_TRUE(c.offload_paths.empty());
  EXPECT_EQ(c.offload_capacity, 16 * kGiB);
  EXPECT_EQ(c.offload_region_size, 64 * kMiB);
  EXPECT_EQ(c.offload_eviction_policy, "fifo");
  EXPECT_EQ(c.offload_write_policy, "demote_on_evict");
  EXPECT_EQ(c.staging_buffer_size, 1280 * kMiB);
  EXPECT_DOUBLE_EQ(c.staging_usable_ratio, 0.9);
  EXPECT_FALSE(c.offload_warm_restart);
  EXPECT_FALSE(c.offload_page_cache_reads);
  EXPECT_FALSE(c.promote_on_hit);
  EXPECT_TRUE(IsInvalid(ParseBody(R"("enable_offload": true)"), {"offload_paths"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("offload_paths": "a,,b")"), {"offload_paths", "empty"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("offload_paths": [1])"), {"offload_paths"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("offload_eviction_policy": "mru")"),
                        {"offload_eviction_policy", "mru", "fifo"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("offload_write_policy": "eager")"),
                        {"offload_write_policy", "write_behind"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("offload_io_engine": "aio")"), {"offload_io_engine"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("offload_region_size": 5000)"), {"offload_region_size"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("staging_usable_ratio": 0)"), {"staging_usable_ratio"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("staging_usable_ratio": 1.5)"), {"staging_usable_ratio"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("staging_ttl_ms": 0)"), {"staging_ttl_ms"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("promote_min_hits": 0)"), {"promote_min_hits"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("enable_offload": true, "offload_paths": "/x",
                                      "offload_capacity": "1MiB")"),
                        {"offload_capacity", "region"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("enable_offload": true, "offload_paths": "/x",
                                      "staging_buffer_size": "512KiB")"),
                        {"staging_buffer_size"}));
  auto list = ParseBody(R"("offload_paths": " /a/t , /b/t ")");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ(list->offload_paths, (std::vector<std::string>{"/a/t", "/b/t"}));
}

TEST(ConfigTest, HostnameAndPreferredSegmentFromKeysAndEnvironment) {
  auto keys = ParseBody(R"("local_hostname": "node7", "preferred_segment": "node7:12:0")");
  ASSERT_TRUE(keys.ok()) << keys.status().ToString();
  EXPECT_EQ(keys->local_hostname, "node7");
  EXPECT_EQ(keys->preferred_segment, "node7:12:0");
  ::setenv("TIERKV_LOCAL_HOSTNAME", "node9", 1);
  ::setenv("TIERKV_PREFERRED_SEGMENT", "node9:1:0", 1);
  auto env = ParseBody(R"("local_hostname": "node7")");
  ::setenv("TIERKV_LOCAL_HOSTNAME", "", 1);  // empty counts as unset
  ::setenv("TIERKV_PREFERRED_SEGMENT", "", 1);
  auto empty = ParseBody(R"("local_hostname": "node7")");
  ::unsetenv("TIERKV_LOCAL_HOSTNAME");
  ::unsetenv("TIERKV_PREFERRED_SEGMENT");
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->local_hostname, "node9");  // the environment wins
  EXPECT_EQ(env->preferred_segment, "node9:1:0");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->local_hostname, "node7");
  EXPECT_EQ(empty->preferred_segment, "");
  EXPECT_TRUE(IsInvalid(ParseBody(R"("preferred_segment": 3)"), {"preferred_segment"}));
}

TEST(ConfigOffloadTest, UsableRatioFromEnvironment) {
  ::setenv("TIERKV_STAGING_USABLE_RATIO", "0.25", 1);
  auto c = ParseBody(R"("staging_usable_ratio": 0.5)");
  ::setenv("TIERKV_STAGING_USABLE_RATIO", "abc", 1);
  auto bad = ParseBody("");
  ::setenv("TIERKV_STAGING_USABLE_RATIO", "1.01", 1);
  auto too_big = ParseBody("");
  ::unsetenv("TIERKV_STAGING_USABLE_RATIO");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_DOUBLE_EQ(c->staging_usable_ratio, 0.25);  // the environment wins
  EXPECT_TRUE(IsInvalid(bad, {"TIERKV_STAGING_USABLE_RATIO", "abc"}));
  EXPECT_TRUE(IsInvalid(too_big, {"TIERKV_STAGING_USABLE_RATIO"}));
}

TEST(ConfigParseTest, MooncakeStyleEmbeddedConfig) {
  Result<Config> config = ParseConfig(R"({
    "local_hostname": "localhost",
    "metadata_server": "P2PHANDSHAKE",
    "global_segment_size": "80GB",
    "local_buffer_size": "4gb",
    "protocol": "tcp",
    "device_name": "",
    "master_server_address": "localhost:50051"
  })");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->global_segment_size, 80 * kGiB);
  EXPECT_EQ(config->local_buffer_size, 4 * kGiB);
}

// ---------------------------------------------------------------- ParseSize

TEST(ParseSizeTest, PlainNumbersAreBytes) {
  EXPECT_EQ(*ParseSize("0"), 0u);
  EXPECT_EQ(*ParseSize("1"), 1u);
  EXPECT_EQ(*ParseSize("1024"), 1024u);
  EXPECT_EQ(*ParseSize("0080"), 80u);
  EXPECT_EQ(*ParseSize("18446744073709551615"), kMax);
}

TEST(ParseSizeTest, EveryUnitIs1024Based) {
  const std::vector<std::pair<std::string, uint64_t>> units = {
      {"B", 1},     {"K", kKiB},   {"KB", kKiB},  {"KiB", kKiB}, {"M", kMiB},
      {"MB", kMiB}, {"MiB", kMiB}, {"G", kGiB},   {"GB", kGiB},  {"GiB", kGiB},
      {"T", kTiB},  {"TB", kTiB},  {"TiB", kTiB},
  };
  for (const auto& [unit, factor] : units) {
    Result<uint64_t> size = ParseSize("3" + unit);
    ASSERT_TRUE(size.ok()) << unit << ": " << size.status().ToString();
    EXPECT_EQ(*size, 3 * factor) << unit;
  }
}

TEST(ParseSizeTest, UnitsAreCaseInsensitive) {
  EXPECT_EQ(*ParseSize("4gb"), 4 * kGiB);
  EXPECT_EQ(*ParseSize("4Gb"), 4 * kGiB);
  EXPECT_EQ(*ParseSize("4gB"), 4 * kGiB);
  EXPECT_EQ(*ParseSize("4g"), 4 * kGiB);
  EXPECT_EQ(*ParseSize("512mib"), 512 * kMiB);
  EXPECT_EQ(*ParseSize("512MIB"), 512 * kMiB);
  EXPECT_EQ(*ParseSize("1kIb"), kKiB);
  EXPECT_EQ(*ParseSize("2tib"), 2 * kTiB);
  EXPECT_EQ(*ParseSize("7b"), 7u);
}

TEST(ParseSizeTest, WhitespaceBetweenNumberAndUnitAndAround) {
  EXPECT_EQ(*ParseSize("80 GB"), 80 * kGiB);
  EXPECT_EQ(*ParseSize("80\tGB"), 80 * kGiB);
  EXPECT_EQ(*ParseSize("80   GiB"), 80 * kGiB);
  EXPECT_EQ(*ParseSize("  80GB  "), 80 * kGiB);
  EXPECT_EQ(*ParseSize(" 1024 "), 1024u);
}

TEST(ParseSizeTest, FractionsThatAreWholeBytes) {
  EXPECT_EQ(*ParseSize("1.5GB"), kGiB + kGiB / 2);
  EXPECT_EQ(*ParseSize("1.5 gib"), kGiB + kGiB / 2);
  EXPECT_EQ(*ParseSize("0.5K"), 512u);
  EXPECT_EQ(*ParseSize("0.25KiB"), 256u);
  EXPECT_EQ(*ParseSize("2.50MB"), 2 * kMiB + kMiB / 2);
  EXPECT_EQ(*ParseSize("0.0009765625K"), 1u);
  EXPECT_EQ(*ParseSize("1.0"), 1u);
  EXPECT_EQ(*ParseSize("3.000B"), 3u);
  EXPECT_EQ(*ParseSize("0.5T"), kTiB / 2);
  // Largest value expressible with a fraction: 2^64 - 1 bytes.
  EXPECT_EQ(*ParseSize("18014398509481983.9990234375K"), kMax);
}

TEST(ParseSizeTest, FractionsThatAreNotWholeBytesAreRejected) {
  EXPECT_TRUE(IsInvalid(ParseSize("1.5"), {"whole number of bytes"}));
  EXPECT_TRUE(IsInvalid(ParseSize("0.5B"), {"whole number of bytes"}));
  EXPECT_TRUE(IsInvalid(ParseSize("0.1KB"), {"whole number of bytes"}));
  EXPECT_TRUE(IsInvalid(ParseSize("0.00048828125K"), {"whole number of bytes"}));  // 0.5 byte
  EXPECT_TRUE(IsInvalid(ParseSize("1.00000000000000000001G"), {"too many digits"}));
}

TEST(ParseSizeTest, MalformedNumbersAreRejected) {
  for (const char* text : {"", "   ", "GB", "1.GB", ".5GB", "1..5GB", "1.5.0GB", "+1GB", "1e9",
                           "1E3", "0x10", "1,5GB", "8 0GB", "KB80", "80 G B", "1_000"}) {
    EXPECT_TRUE(IsInvalid(ParseSize(text), {"invalid size"})) << "\"" << text << "\"";
  }
}

TEST(ParseSizeTest, NegativeIsRejected) {
  EXPECT_TRUE(IsInvalid(ParseSize("-1"), {"negative"}));
  EXPECT_TRUE(IsInvalid(ParseSize("-1GB"), {"negative"}));
  EXPECT_TRUE(IsInvalid(ParseSize(" -0"), {"negative"}));
}

TEST(ParseSizeTest, UnknownUnitsAreRejected) {
  for (const char* text : {"80XB", "80GBs", "80Gi", "80PB", "80P", "80 bytes", "80GB extra",
                           "80kbit", "80gigabytes", "80Ki"}) {
    EXPECT_TRUE(IsInvalid(ParseSize(text), {"unknown unit"})) << text;
  }
}

TEST(ParseSizeTest, OverflowIsRejected) {
  for (const char* text : {"18446744073709551616", "99999999999999999999999", "16777216TB",
                           "17179869184GB", "18014398509481984K", "16777216.5TB"}) {
    EXPECT_TRUE(IsInvalid(ParseSize(text), {"too large"})) << text;
  }
  EXPECT_EQ(*ParseSize("16777215TB"), kMax - kTiB + 1);
  EXPECT_EQ(*ParseSize("16777215.5TB"), kMax - kTiB / 2 + 1);
}

// ---------------------------------------------------------------- sizes in JSON

TEST(ConfigSizeKeyTest, IntegersAndStrings) {
  for (const char* key : {"global_segment_size", "local_buffer_size"}) {
    Result<Config> a = ParseKey(key, "1073741824");
    ASSERT_TRUE(a.ok()) << a.status().ToString();
    Result<Config> b = ParseKey(key, "\"3 GiB\"");
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    Result<Config> c = ParseKey(key, "\"1.5GB\"");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    if (std::string(key) == "global_segment_size") {
      EXPECT_EQ(a->global_segment_size, kGiB);
      EXPECT_EQ(b->global_segment_size, 3 * kGiB);
      EXPECT_EQ(c->global_segment_size, kGiB + kGiB / 2);
    } else {
      EXPECT_EQ(a->local_buffer_size, kGiB);
      EXPECT_EQ(b->local_buffer_size, 3 * kGiB);
      EXPECT_EQ(c->local_buffer_size, kGiB + kGiB / 2);
    }
  }
}

TEST(ConfigSizeKeyTest, LargestJsonInteger) {
  Result<Config> config = ParseKey("global_segment_size", "18446744073709551615");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->global_segment_size, kMax);
}

TEST(ConfigSizeKeyTest, BadValuesNameTheKey) {
  for (const char* key : {"global_segment_size", "local_buffer_size"}) {
    for (const char* value :
         {"-1", "-1073741824", "1.5", "1.5e9", "1e30", "18446744073709551616", "true", "null", "[]",
          "{}", "\"\"", "\"abc\"", "\"80XB\"", "\"-1GB\"", "\"99999999999999999999GB\""}) {
      EXPECT_TRUE(IsInvalid(ParseKey(key, value), {key})) << key << " = " << value;
    }
  }
  EXPECT_TRUE(IsInvalid(ParseKey("global_segment_size", "-1"), {"negative"}));
  EXPECT_TRUE(IsInvalid(ParseKey("local_buffer_size", "\"80XB\""), {"unknown unit", "XB"}));
  EXPECT_TRUE(IsInvalid(ParseKey("local_buffer_size", "\"16777216TB\""), {"too large"}));
}

// ---------------------------------------------------------------- ParseBool

TEST(ParseBoolTest, TrueAndFalseInAnyCase) {
  for (const char* text : {"true", "TRUE", "True", "tRuE"}) {
    Result<bool> b = ParseBool(text);
    ASSERT_TRUE(b.ok()) << text;
    EXPECT_TRUE(*b) << text;
  }
  for (const char* text : {"false", "FALSE", "False", "fAlSe"}) {
    Result<bool> b = ParseBool(text);
    ASSERT_TRUE(b.ok()) << text;
    EXPECT_FALSE(*b) << text;
  }
}

TEST(ParseBoolTest, EverythingElseFails) {
  for (const char* text : {"", "yes", "no", "1", "0", "on", "off", "t", "f", "y", "n", " true",
                           "false ", "truee", "falsey", "null", "True\n"}) {
    EXPECT_TRUE(IsInvalid(ParseBool(text), {"expected true or false"})) << "\"" << text << "\"";
  }
}

// ---------------------------------------------------------------- bools in JSON

const std::vector<std::string> kBoolKeys = {"enable_offload", "verify_checksum",
                                            "require_registered_buffers", "use_huge_pages",
                                            "master_meta_channel"};

bool GetBoolField(const Config& c, const std::string& key) {
  if (key == "enable_offload") return c.enable_offload;
  if (key == "verify_checksum") return c.verify_checksum;
  if (key == "require_registered_buffers") return c.require_registered_buffers;
  if (key == "master_meta_channel") return c.master_meta_channel;
  return c.use_huge_pages;
}

TEST(ConfigBoolKeyTest, JsonBooleansAndStrings) {
  const std::vector<std::pair<std::string, bool>> cases = {
      {"true", true},     {"false", false},     {"\"true\"", true}, {"\"false\"", false},
      {"\"TRUE\"", true}, {"\"FALSE\"", false}, {"\"True\"", true}, {"\"False\"", false},
  };
  for (const std::string& key : kBoolKeys) {
    for (const auto& [value, expected] : cases) {
      Result<Config> config = ParseKey(key, value);
      ASSERT_TRUE(config.ok()) << key << " = " << value << ": " << config.status().ToString();
      EXPECT_EQ(GetBoolField(*config, key), expected) << key << " = " << value;
    }
  }
}

TEST(ConfigBoolKeyTest, StringFalseIsNeverTrue) {
  // Three of the four default to true, so a parser that treated any non-empty
  // string as true would leave them true.
  for (const std::string& key : kBoolKeys) {
    for (const char* value : {"\"false\"", "\"FALSE\"", "\"False\""}) {
      Result<Config> config = ParseKey(key, value);
      ASSERT_TRUE(config.ok()) << config.status().ToString();
      EXPECT_FALSE(GetBoolField(*config, key)) << key << " = " << value;
    }
  }
}

TEST(ConfigBoolKeyTest, NonBooleansNameTheKey) {
  for (const std::string& key : kBoolKeys) {
    for (const char* value : {"1", "0", "1.0", "\"yes\"", "\"no\"", "\"1\"", "\"0\"", "\"\"",
                              "\"on\"", "null", "[]", "{}", "[true]"}) {
      EXPECT_TRUE(IsInvalid(ParseKey(key, value), {key})) << key << " = " << value;
    }
  }
}

// ---------------------------------------------------------------- integers

TEST(ConfigIntegerKeyTest, AcceptsJsonIntegersAndDigitStrings) {
  Result<Config> config = ParseBody(
      R"("default_kv_lease_ttl_ms": 5000, "put_start_discard_timeout_ms": "45000",
         "metadata_shards": "256", "transfer_threads": 16)");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->default_kv_lease_ttl_ms, 5000u);
  EXPECT_EQ(config->put_start_discard_timeout_ms, 45000u);
  EXPECT_EQ(config->metadata_shards, 256u);
  EXPECT_EQ(config->transfer_threads, 16u);
}

TEST(ConfigIntegerKeyTest, LeaseTtlAcceptsFullRange) {
  Result<Config> zero = ParseKey("default_kv_lease_ttl_ms", "0");
  ASSERT_TRUE(zero.ok()) << zero.status().ToString();
  EXPECT_EQ(zero->default_kv_lease_ttl_ms, 0u);
  Result<Config> max = ParseKey("default_kv_lease_ttl_ms", "18446744073709551615");
  ASSERT_TRUE(max.ok()) << max.status().ToString();
  EXPECT_EQ(max->default_kv_lease_ttl_ms, kMax);
}

TEST(ConfigIntegerKeyTest, BadValuesNameTheKey) {
  for (const char* key : {"default_kv_lease_ttl_ms", "put_start_discard_timeout_ms",
                          "metadata_shards", "transfer_threads"}) {
    for (const char* value :
         {"-1", "1.5", "8.0", "1e3", "\"abc\"", "\"-5\"", "\" 5\"", "\"5 \"", "\"5ms\"", "\"\"",
          "\"1.5\"", "\"99999999999999999999\"", "18446744073709551616", "true", "null", "[1]"}) {
      EXPECT_TRUE(IsInvalid(ParseKey(key, value), {key})) << key << " = " << value;
    }
  }
  EXPECT_TRUE(IsInvalid(ParseKey("transfer_threads", "-1"), {"negative"}));
  EXPECT_TRUE(IsInvalid(ParseKey("metadata_shards", "8.0"), {"floating-point"}));
}

TEST(ConfigIntegerKeyTest, MetadataShardsRange) {
  EXPECT_TRUE(ParseKey("metadata_shards", "1").ok());
  EXPECT_TRUE(ParseKey("metadata_shards", "4096").ok());
  EXPECT_TRUE(IsInvalid(ParseKey("metadata_shards", "0"), {"metadata_shards", "1..4096"}));
  EXPECT_TRUE(IsInvalid(ParseKey("metadata_shards", "4097"), {"metadata_shards"}));
  // 2^32 + 64 must not wrap to a valid 64.
  EXPECT_TRUE(IsInvalid(ParseKey("metadata_shards", "4294967360"), {"metadata_shards"}));
}

TEST(ConfigIntegerKeyTest, TransferThreadsRange) {
  Result<Config> zero = ParseKey("transfer_threads", "0");
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->transfer_threads, 0u);
  EXPECT_TRUE(ParseKey("transfer_threads", "256").ok());
  EXPECT_TRUE(IsInvalid(ParseKey("transfer_threads", "257"), {"transfer_threads"}));
  EXPECT_TRUE(IsInvalid(ParseKey("transfer_threads", "4294967296"), {"transfer_threads"}));
}

TEST(ConfigIntegerKeyTest, PutStartDiscardTimeoutMustBePositive) {
  EXPECT_TRUE(ParseKey("put_start_discard_timeout_ms", "1").ok());
  EXPECT_TRUE(IsInvalid(ParseKey("put_start_discard_timeout_ms", "0"),
                        {"put_start_discard_timeout_ms", "greater than 0"}));
}

// ---------------------------------------------------------------- ratios

TEST(ConfigRatioKeyTest, AcceptsNumbersInRange) {
  Result<Config> config = ParseBody(R"("eviction_high_watermark_ratio": 1, "eviction_ratio": 1)");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_DOUBLE_EQ(config->eviction_high_watermark_ratio, 1.0);
  EXPECT_DOUBLE_EQ(config->eviction_ratio, 1.0);
  config = ParseBody(R"("eviction_high_watermark_ratio": 0.5, "eviction_ratio": 1e-3)");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_DOUBLE_EQ(config->eviction_high_watermark_ratio, 0.5);
  EXPECT_DOUBLE_EQ(config->eviction_ratio, 0.001);
}

TEST(ConfigRatioKeyTest, OutOfRangeNamesTheKey) {
  for (const char* key : {"eviction_high_watermark_ratio", "eviction_ratio"}) {
    for (const char* value : {"0", "0.0", "-0.1", "1.0001", "2", "-1"}) {
      EXPECT_TRUE(IsInvalid(ParseKey(key, value), {key, "(0, 1]"})) << key << " = " << value;
    }
  }
}

TEST(ConfigRatioKeyTest, NonNumbersNameTheKey) {
  for (const char* key : {"eviction_high_watermark_ratio", "eviction_ratio"}) {
    for (const char* value : {"\"0.9\"", "true", "null", "[0.9]"}) {
      EXPECT_TRUE(IsInvalid(ParseKey(key, value), {key, "a number"})) << key << " = " << value;
    }
  }
}

TEST(ConfigRatioKeyTest, EvictionRatioMustNotExceedWatermark) {
  EXPECT_TRUE(ParseBody(R"("eviction_high_watermark_ratio": 0.2, "eviction_ratio": 0.2)").ok());
  EXPECT_TRUE(IsInvalid(ParseBody(R"("eviction_high_watermark_ratio": 0.1, "eviction_ratio": 0.2)"),
                        {"eviction_high_watermark_ratio", "eviction_ratio"}));
}

TEST(ConfigRatioKeyTest, NanIsRejected) {
  Config config;
  config.eviction_high_watermark_ratio = std::nan("");
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"eviction_high_watermark_ratio"}));
  config = Config();
  config.eviction_ratio = std::nan("");
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"eviction_ratio"}));
}

// ---------------------------------------------------------------- strings

TEST(ConfigStringKeyTest, NonStringsNameTheKey) {
  for (const char* key : {"mode", "master_server_address", "metadata_server", "local_hostname",
                          "protocol", "device_name"}) {
    for (const char* value : {"1", "true", "null", "[\"a\"]", "{\"a\": 1}"}) {
      EXPECT_TRUE(IsInvalid(ParseKey(key, value), {key, "expected a string"}))
          << key << " = " << value;
    }
  }
}

TEST(ConfigStringKeyTest, UnicodeStringsAreKept) {
  Result<Config> config = ParseKey("local_hostname", R"("h\u00f6st")");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->local_hostname, "h\xc3\xb6st");
}

// ---------------------------------------------------------------- mode

TEST(ConfigModeTest, EmbeddedAndStandaloneStore) {
  Result<Config> embedded = ParseKey("mode", "\"embedded\"");
  ASSERT_TRUE(embedded.ok()) << embedded.status().ToString();
  EXPECT_EQ(embedded->mode, Mode::kEmbedded);
  Result<Config> standalone = ParseBody(kStandalonePrefix);
  ASSERT_TRUE(standalone.ok()) << standalone.status().ToString();
  EXPECT_EQ(standalone->mode, Mode::kStandaloneStore);
  EXPECT_EQ(standalone->global_segment_size, 0u);
}

TEST(ConfigModeTest, UnknownModeNamesKeyAndAllowedValues) {
  for (const char* value : {"\"standalone\"", "\"Embedded\"", "\"EMBEDDED\"", "\"\"",
                            "\"standalone_store\"", "\"master\""}) {
    EXPECT_TRUE(IsInvalid(ParseKey("mode", value), {"mode", "embedded", "standalone-store"}))
        << value;
  }
}

TEST(ConfigModeTest, ValidateRejectsOutOfRangeEnum) {
  Config config;
  config.mode = static_cast<Mode>(7);
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"mode", "embedded", "standalone-store"}));
}

TEST(ConfigModeTest, EmbeddedNeedsASegment) {
  EXPECT_TRUE(IsInvalid(ParseKey("global_segment_size", "0"),
                        {"global_segment_size",
                         "embedded mode contributes a segment; set global_segment_size > 0 or use "
                         "mode standalone-store"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("mode": "embedded", "global_segment_size": "0GB")"),
                        {"global_segment_size"}));
}

TEST(ConfigModeTest, StandaloneStoreContributesNoSegment) {
  // Defaults to 1 GiB, which a pure requester must not have.
  EXPECT_TRUE(IsInvalid(ParseBody(R"("mode": "standalone-store", "master_server_address": "m:1")"),
                        {"global_segment_size", "standalone-store"}));
  EXPECT_TRUE(IsInvalid(ParseBody(R"("mode": "standalone-store", "master_server_address": "m:1",
                                     "global_segment_size": "1B")"),
                        {"global_segment_size"}));
}

TEST(ConfigModeTest, StandaloneStoreNeedsAMasterAddress) {
  EXPECT_TRUE(IsInvalid(ParseBody(R"("mode": "standalone-store", "global_segment_size": 0)"),
                        {"master_server_address"}));
  // Embedded mode runs the master in-process when the address is empty.
  EXPECT_TRUE(ParseKey("master_server_address", "\"\"").ok());
}

// ---------------------------------------------------------------- other rules

TEST(ConfigValidationTest, LocalBufferSizeMustBePositive) {
  EXPECT_TRUE(IsInvalid(ParseKey("local_buffer_size", "0"), {"local_buffer_size"}));
  EXPECT_TRUE(IsInvalid(ParseKey("local_buffer_size", "\"0 MiB\""), {"local_buffer_size"}));
  EXPECT_TRUE(ParseKey("local_buffer_size", "1").ok());
}

TEST(ConfigValidationTest, Protocols) {
  for (const char* protocol : {"tcp", "rdma", "shm", "auto"}) {
    Result<Config> config = ParseKey("protocol", std::string("\"") + protocol + "\"");
    ASSERT_TRUE(config.ok()) << config.status().ToString();
    EXPECT_EQ(config->protocol, protocol);
  }
  for (const char* value : {"\"udp\"", "\"TCP\"", "\"\"", "\"rdma \"", "\"nvlink\""}) {
    EXPECT_TRUE(IsInvalid(ParseKey("protocol", value), {"protocol", "tcp", "rdma", "shm", "auto"}))
        << value;
  }
}

TEST(ConfigValidationTest, DeviceNameList) {
  for (const char* value : {"\"\"", "\"mlx5_0\"", "\"mlx5_0,mlx5_1\"", "\"a,b,c,d\""}) {
    EXPECT_TRUE(ParseBody(std::string(R"("protocol": "rdma", "device_name": )") + value).ok())
        << value;
  }
  for (const char* value : {"\",\"", "\",mlx5_0\"", "\"mlx5_0,\"", "\"mlx5_0,,mlx5_1\"",
                            "\"mlx5_0, mlx5_1\"", "\" \"", "\"mlx5_0 \""}) {
    EXPECT_TRUE(IsInvalid(ParseBody(std::string(R"("protocol": "rdma", "device_name": )") + value),
                          {"device_name"}))
        << value;
  }
}

TEST(ConfigValidationTest, DeviceNameWithTcpIsOnlyAWarning) {
  Result<Config> config = ParseKey("device_name", "\"mlx5_0\"");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->device_name, "mlx5_0");
}

TEST(ConfigValidationTest, ValidateChecksRangesOfDirectlyBuiltConfigs) {
  Config config;
  config.metadata_shards = 0;
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"metadata_shards"}));
  config.metadata_shards = 5000;
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"metadata_shards"}));
  config = Config();
  config.transfer_threads = 300;
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"transfer_threads"}));
  config = Config();
  config.put_start_discard_timeout_ms = 0;
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"put_start_discard_timeout_ms"}));
  config = Config();
  config.local_buffer_size = 0;
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"local_buffer_size"}));
  config = Config();
  config.protocol = "udp";
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"protocol"}));
  config = Config();
  config.device_name = "a,,b";
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"device_name"}));
  config = Config();
  config.eviction_ratio = 0;
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"eviction_ratio"}));
  config = Config();
  config.eviction_high_watermark_ratio = 1.5;
  EXPECT_TRUE(IsInvalid(ValidateConfig(config), {"eviction_high_watermark_ratio"}));
}

// ---------------------------------------------------------------- unknown keys

TEST(ConfigUnknownKeyTest, CloseKeyGetsASuggestion) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"global_segmet_size", "global_segment_size"},  // one deletion
      {"Mode", "mode"},                               // case only
      {"mdoe", "mode"},                               // transposition
      {"protocl", "protocol"},
      {"transfer_thread", "transfer_threads"},
      {"verify_checksums", "verify_checksum"},
      {"local_bufer_sise", "local_buffer_size"},  // two edits
  };
  for (const auto& [typo, known] : cases) {
    EXPECT_TRUE(IsInvalid(ParseKey(typo, "1"),
                          {"unknown key", "\"" + typo + "\"", "did you mean \"" + known + "\""}))
        << typo;
  }
}

TEST(ConfigUnknownKeyTest, FarKeyGetsNoSuggestion) {
  for (const char* key : {"replica_num", "device", "foo", "", "global_segment_size_bytes"}) {
    Result<Config> config = ParseKey(key, "1");
    EXPECT_TRUE(IsInvalid(config, {"unknown key", std::string("\"") + key + "\""})) << key;
    EXPECT_EQ(config.status().message().find("did you mean"), std::string::npos)
        << config.status().message();
  }
}

TEST(ConfigUnknownKeyTest, NestedKeysAreNotMistakenForTopLevelOnes) {
  EXPECT_TRUE(IsInvalid(ParseKey("extra", R"({"mode": "embedded"})"), {"unknown key", "extra"}));
}

// ---------------------------------------------------------------- document shape

TEST(ConfigDocumentTest, TopLevelMustBeAnObject) {
  for (const char* text : {"[]", "[{}]", "\"mode\"", "42", "true", "null"}) {
    EXPECT_TRUE(IsInvalid(ParseConfig(text), {"must be a JSON object"})) << text;
  }
}

TEST(ConfigDocumentTest, SyntaxErrorsCarryLineAndColumn) {
  Result<Config> config = ParseConfig("{\n  \"mode\": \"embedded\",\n}\n");
  EXPECT_TRUE(IsInvalid(config, {"invalid JSON", "line 3", "column"}));
  EXPECT_EQ(config.status().message().find("json.exception"), std::string::npos);
}

TEST(ConfigDocumentTest, MalformedInputNeverThrows) {
  const std::vector<std::string> inputs = {
      "",
      "   ",
      "{",
      "}",
      "{\"mode\" \"embedded\"}",
      "{\"mode\": embedded}",
      "{'mode': 'embedded'}",
      "{\"mode\": \"embedded\"} {}",
      "{\"a\": 1} // comment",
      "{/* comment */}",
      std::string("{\"local_hostname\": \"\xff\xfe\"}"),
      std::string("\0\x01\x02", 3),
      "{\"global_segment_size\": 1.}",
      "{\"global_segment_size\": 01}",
      "{\"global_segment_size\": NaN}",
  };
  for (const std::string& text : inputs) {
    Result<Config> config = ParseConfig(text);
    EXPECT_TRUE(IsInvalid(config, {"invalid JSON"})) << "input: " << text;
  }
}

TEST(ConfigDocumentTest, DuplicateKeysAreRejected) {
  EXPECT_TRUE(IsInvalid(ParseBody(R"("verify_checksum": true, "verify_checksum": false)"),
                        {"verify_checksum", "more than once"}));
}

TEST(ConfigDocumentTest, FirstErrorInDocumentOrderIsReported) {
  EXPECT_TRUE(IsInvalid(ParseBody(R"("protocl": "tcp", "enable_offload": "yes")"), {"protocl"}));
  EXPECT_TRUE(
      IsInvalid(ParseBody(R"("enable_offload": "yes", "protocl": "tcp")"), {"enable_offload"}));
}

// ---------------------------------------------------------------- files and environment

class ConfigFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* old = std::getenv("TIERKV_CONFIG_PATH")) saved_env_ = old;
    unsetenv("TIERKV_CONFIG_PATH");
    std::string pattern =
        (std::filesystem::temp_directory_path() / "tierkv_config_test_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }

  void TearDown() override {
    if (saved_env_) {
      setenv("TIERKV_CONFIG_PATH", saved_env_->c_str(), 1);
    } else {
      unsetenv("TIERKV_CONFIG_PATH");
    }
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::string Write(const std::string& name, const std::string& contents) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path) << contents;
    return path;
  }

  std::filesystem::path dir_;
  std::optional<std::string> saved_env_;
};

TEST_F(ConfigFileTest, LoadsAFile) {
  const std::string path =
      Write("a.json", R"({"global_segment_size": "2GB", "verify_checksum": "false"})");
  Result<Config> config = LoadConfigFile(path);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->global_segment_size, 2 * kGiB);
  EXPECT_FALSE(config->verify_checksum);
}

TEST_F(ConfigFileTest, MissingFileNamesPathAndErrno) {
  const std::string path = (dir_ / "missing.json").string();
  EXPECT_TRUE(IsInvalid(LoadConfigFile(path), {path, "No such file or directory"}));
}

TEST_F(ConfigFileTest, DirectoryNamesPathAndErrno) {
  EXPECT_TRUE(IsInvalid(LoadConfigFile(dir_.string()), {dir_.string(), "directory"}));
}

TEST_F(ConfigFileTest, UnreadableFileNamesPathAndErrno) {
  if (geteuid() == 0) GTEST_SKIP() << "root can read any file";
  const std::string path = Write("secret.json", "{}");
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  EXPECT_TRUE(IsInvalid(LoadConfigFile(path), {path, "Permission denied"}));
}

TEST_F(ConfigFileTest, ParseErrorsNameThePathAndLine) {
  const std::string path = Write("bad.json", "{\n  \"mode\": \"embedded\"\n  \"protocol\": 1\n}");
  EXPECT_TRUE(IsInvalid(LoadConfigFile(path), {path, "invalid JSON", "line 3"}));
}

TEST_F(ConfigFileTest, ValidationErrorsNameThePathAndKey) {
  const std::string path = Write("v.json", R"({"protocol": "udp"})");
  EXPECT_TRUE(IsInvalid(LoadConfigFile(path), {path, "protocol"}));
}

TEST_F(ConfigFileTest, EmptyFileIsAnError) {
  const std::string path = Write("empty.json", "");
  EXPECT_TRUE(IsInvalid(LoadConfigFile(path), {path, "invalid JSON"}));
}

TEST_F(ConfigFileTest, NoPathAndNoEnvironmentGivesDefaults) {
  Result<Config> config = LoadConfig();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ExpectDefaults(*config);
}

TEST_F(ConfigFileTest, EmptyEnvironmentVariableCountsAsUnset) {
  setenv("TIERKV_CONFIG_PATH", "", 1);
  Result<Config> config = LoadConfig("");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  ExpectDefaults(*config);
}

TEST_F(ConfigFileTest, EnvironmentVariableIsUsed) {
  const std::string path = Write("env.json", R"({"metadata_shards": 7})");
  setenv("TIERKV_CONFIG_PATH", path.c_str(), 1);
  Result<Config> config = LoadConfig();
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->metadata_shards, 7u);
}

TEST_F(ConfigFileTest, ExplicitPathWinsOverEnvironment) {
  const std::string env_path = Write("env.json", R"({"metadata_shards": 7})");
  const std::string explicit_path = Write("explicit.json", R"({"metadata_shards": 9})");
  setenv("TIERKV_CONFIG_PATH", env_path.c_str(), 1);
  Result<Config> config = LoadConfig(explicit_path);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->metadata_shards, 9u);
}

TEST_F(ConfigFileTest, ExplicitPathWorksWithoutEnvironment) {
  const std::string path = Write("explicit.json", R"({"metadata_shards": 9})");
  Result<Config> config = LoadConfig(path);
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  EXPECT_EQ(config->metadata_shards, 9u);
}

TEST_F(ConfigFileTest, MissingExplicitPathDoesNotFallBackToEnvironment) {
  const std::string env_path = Write("env.json", "{}");
  const std::string missing = (dir_ / "nope.json").string();
  setenv("TIERKV_CONFIG_PATH", env_path.c_str(), 1);
  EXPECT_TRUE(IsInvalid(LoadConfig(missing), {missing}));
}

TEST_F(ConfigFileTest, MissingEnvironmentPathIsAnError) {
  const std::string missing = (dir_ / "nope.json").string();
  setenv("TIERKV_CONFIG_PATH", missing.c_str(), 1);
  EXPECT_TRUE(IsInvalid(LoadConfig(), {missing, "No such file or directory"}));
}

TEST_F(ConfigFileTest, InvalidEnvironmentFileIsAnError) {
  const std::string path = Write("env.json", R"({"mode": "standalone"})");
  setenv("TIERKV_CONFIG_PATH", path.c_str(), 1);
  EXPECT_TRUE(IsInvalid(LoadConfig(), {path, "mode"}));
}

TEST(ConfigEvictionPolicyTest, LruByDefaultReuseAcceptedOthersNamed) {
  EXPECT_EQ(Config{}.eviction_policy, "lru");
  Result<Config> reuse = ParseConfig(R"({"eviction_policy": "reuse"})");
  ASSERT_TRUE(reuse.ok()) << reuse.status().ToString();
  EXPECT_EQ(reuse->eviction_policy, "reuse");
  Result<Config> bad = ParseConfig(R"({"eviction_policy": "lfu"})");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.code(), ErrorCode::INVALID_CONFIG);
  EXPECT_NE(bad.status().message().find("eviction_policy"), std::string::npos);
  EXPECT_NE(bad.status().message().find("\"reuse\""), std::string::npos);
  EXPECT_FALSE(ParseConfig(R"({"eviction_policy": 1})").ok());
}

}  // namespace
}  // namespace tierkv
