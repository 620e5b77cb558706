#include "tierkv/config.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <system_error>
#include <unordered_set>
#include <vector>

#include "common/host_port.h"
#include "common/key.h"
#include "common/logging.h"

namespace tierkv {
namespace {

// ordered_json keeps document order, so the first bad key reported is the first
// one in the file rather than the alphabetically first.
using Json = nlohmann::ordered_json;

constexpr uint32_t kMaxMetadataShards = 4096;
constexpr uint32_t kMaxTransferThreads = 256;

Status Invalid(std::string message) {
  return Status(ErrorCode::INVALID_CONFIG, std::move(message));
}

// Prefixes an error with the key it is about, so every message names the key.
Status KeyError(std::string_view key, std::string_view message) {
  std::string out(key);
  out += ": ";
  out += message;
  return Invalid(std::move(out));
}

char ToLower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), ToLower);
  return out;
}

// %g keeps ratios short in messages ("0.9", not std::to_string's "0.900000").
std::string FormatDouble(double v) {
  std::array<char, 32> buf;
  std::snprintf(buf.data(), buf.size(), "%g", v);
  return buf.data();
}

bool IsSpace(char c) { return c == ' ' || c == '\t'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Quotes a user-supplied string for an error message; JSON escaping keeps control
// characters and invalid bytes from garbling the log line.
std::string Quote(std::string_view s) {
  return Json(std::string(s)).dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Optimal-string-alignment distance (Levenshtein plus adjacent transposition), so
// that "mdoe" is one edit from "mode".
size_t EditDistance(std::string_view a, std::string_view b) {
  const size_t n = a.size();
  const size_t m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i) {
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[n][m];
}

std::string_view JsonTypeName(const Json& value) {
  if (value.is_number_float()) return "a floating-point number";
  if (value.is_number_integer() && !value.is_number_unsigned()) return "a negative integer";
  if (value.is_number()) return "an integer";
  if (value.is_string()) return "a string";
  if (value.is_boolean()) return "a boolean";
  if (value.is_null()) return "null";
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return "an unsupported value";
}

Status TypeError(std::string_view key, std::string_view expected, const Json& value) {
  std::string message = "expected ";
  message += expected;
  message += ", got ";
  message += JsonTypeName(value);
  if (value.is_primitive() && !value.is_null()) message += " (" + value.dump() + ")";
  return KeyError(key, message);
}

Status GetString(const std::string& key, const Json& value, std::string* out) {
  if (!value.is_string()) return TypeError(key, "a string", value);
  *out = value.get<std::string>();
  return Status::Ok();
}

Status GetBool(const std::string& key, const Json& value, bool* out) {
  if (value.is_boolean()) {
    *out = value.get<bool>();
    return Status::Ok();
  }
  if (value.is_string()) {
    Result<bool> parsed = ParseBool(value.get<std::string>());
    if (!parsed.ok()) return KeyError(key, parsed.status().message());
    *out = *parsed;
    return Status::Ok();
  }
  return TypeError(key, "true or false (or the string \"true\"/\"false\")", value);
}

// Decimal digits only: no sign, no spaces, no exponent.
std::optional<uint64_t> ParseDecimal(std::string_view s) {
  if (s.empty()) return std::nullopt;
  uint64_t v = 0;
  for (char c : s) {
    if (!IsDigit(c)) return std::nullopt;
    if (__builtin_mul_overflow(v, 10u, &v) || __builtin_add_overflow(v, c - '0', &v)) {
      return std::nullopt;
    }
  }
  return v;
}

// `max` is checked here, before the caller narrows to a smaller type, so that an
// out-of-range value can never wrap into the valid range.
Status GetUint(const std::string& key, const Json& value, uint64_t max, uint64_t* out) {
  uint64_t v = 0;
  if (value.is_number_unsigned()) {
    v = value.get<uint64_t>();
  } else if (value.is_number_integer()) {
    return KeyError(key, "must not be negative, got " + value.dump());
  } else if (value.is_string()) {
    const std::string& s = value.get_ref<const std::string&>();
    std::optional<uint64_t> parsed = ParseDecimal(s);
    if (!parsed) {
      return KeyError(key, "expected a non-negative integer, got the string " + Quote(s));
    }
    v = *parsed;
  } else {
    return TypeError(key, "a non-negative integer", value);
  }
  if (v > max) {
    return KeyError(key, std::to_string(v) + " is too large (maximum " + std::to_string(max) + ")");
  }
  *out = v;
  return Status::Ok();
}

Status GetSize(const std::string& key, const Json& value, uint64_t* out) {
  if (value.is_number_unsigned()) {
    *out = value.get<uint64_t>();
    return Status::Ok();
  }
  if (value.is_number_integer()) {
    return KeyError(key, "a size must not be negative, got " + value.dump());
  }
  if (value.is_string()) {
    Result<uint64_t> parsed = ParseSize(value.get<std::string>());
    if (!parsed.ok()) return KeyError(key, parsed.status().message());
    *out = *parsed;
    return Status::Ok();
  }
  if (value.is_number_float()) {
    // JSON numbers past uint64 also land here.
    return KeyError(key,
                    "expected a non-negative integer number of bytes or a size string such as "
                    "\"1.5GB\", got the number " +
                        value.dump());
  }
  return TypeError(key, "a non-negative integer or a size string such as \"80GB\"", value);
}

Status GetRatio(const std::string& key, const Json& value, double* out) {
  if (!value.is_number()) return TypeError(key, "a number", value);
  *out = value.get<double>();
  return Status::Ok();
}

// A list of paths: a JSON array of strings, or one string of comma-separated paths.
Status GetPathList(const std::string& key, const Json& value, std::vector<std::string>* out) {
  std::vector<std::string> paths;
  if (value.is_string()) {
    std::string_view rest = value.get_ref<const std::string&>();
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      paths.emplace_back(Trim(rest.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  } else if (value.is_array()) {
    for (const auto& item : value) {
      if (!item.is_string()) return TypeError(key, "an array of path strings", item);
      paths.push_back(item.get<std::string>());
    }
  } else {
    return TypeError(key, "an array of paths or a comma-separated string", value);
  }
  for (const auto& p : paths) {
    if (p.empty()) return KeyError(key, "empty path in the list");
  }
  *out = std::move(paths);
  return Status::Ok();
}

// One entry per accepted key, in the order docs/configuration.md lists them: the key's name and
// how its JSON value is parsed into the Config. Unknown keys are those not here.
struct KeySpec {
  std::string_view name;
  Status (*apply)(const std::string& key, const Json& value, Config* config);
};

// Setters of the key table: the JSON value parsed by Get* into Config's member M (of the right
// type); Uint32Key checks the maximum before narrowing.
template <auto M>
Status StringKey(const std::string& key, const Json& value, Config* config) {
  return GetString(key, value, &(config->*M));
}
template <auto M>
Status BoolKey(const std::string& key, const Json& value, Config* config) {
  return GetBool(key, value, &(config->*M));
}
template <auto M>
Status SizeKey(const std::string& key, const Json& value, Config* config) {
  return GetSize(key, value, &(config->*M));
}
template <auto M>
Status RatioKey(const std::string& key, const Json& value, Config* config) {
  return GetRatio(key, value, &(config->*M));
}
template <auto M>
Status PathListKey(const std::string& key, const Json& value, Config* config) {
  return GetPathList(key, value, &(config->*M));
}
template <auto M>
Status UintKey(const std::string& key, const Json& value, Config* config) {
  return GetUint(key, value, std::numeric_limits<uint64_t>::max(), &(config->*M));
}
template <auto M, uint64_t kMax>
Status Uint32Key(const std::string& key, const Json& value, Config* config) {
  uint64_t v = 0;
  if (Status s = GetUint(key, value, kMax, &v); !s.ok()) return s;
  config->*M = static_cast<uint32_t>(v);
  return Status::Ok();
}

const KeySpec kKeys[] = {
    {"mode",
     [](const std::string& key, const Json& value, Config* config) -> Status {
       std::string mode;
       if (Status s = GetString(key, value, &mode); !s.ok()) return s;
       if (mode == ModeName(Mode::kEmbedded)) {
         config->mode = Mode::kEmbedded;
       } else if (mode == ModeName(Mode::kStandaloneStore)) {
         config->mode = Mode::kStandaloneStore;
       } else {
         return KeyError(key, "unknown mode " + Quote(mode) +
                                  "; allowed values are \"embedded\" and \"standalone-store\"");
       }
       return Status::Ok();
     }},
    {"master_server_address", &StringKey<&Config::master_server_address>},
    {"metadata_server", &StringKey<&Config::metadata_server>},
    {"local_hostname", &StringKey<&Config::local_hostname>},
    {"preferred_segment", &StringKey<&Config::preferred_segment>},
    {"global_segment_size", &SizeKey<&Config::global_segment_size>},
    {"local_buffer_size", &SizeKey<&Config::local_buffer_size>},
    {"protocol", &StringKey<&Config::protocol>},
    {"device_name", &StringKey<&Config::device_name>},
    {"cluster_token_file", &StringKey<&Config::cluster_token_file>},
    {"cluster_accept_token_file", &StringKey<&Config::cluster_accept_token_file>},
    {"tls_ca_file", &StringKey<&Config::tls_ca_file>},
    {"tls_cert_file", &StringKey<&Config::tls_cert_file>},
    {"tls_key_file", &StringKey<&Config::tls_key_file>},
    {"data_tls_cert_file", &StringKey<&Config::data_tls_cert_file>},
    {"data_tls_key_file", &StringKey<&Config::data_tls_key_file>},
    {"data_tls_ca_file", &StringKey<&Config::data_tls_ca_file>},
    {"segment_tenant", &StringKey<&Config::segment_tenant>},
    {"etcd_user", &StringKey<&Config::etcd_user>},
    {"etcd_password_file", &StringKey<&Config::etcd_password_file>},
    {"etcd_ca_file", &StringKey<&Config::etcd_ca_file>},
    {"enable_offload", &BoolKey<&Config::enable_offload>},
    {"default_kv_lease_ttl_ms", &UintKey<&Config::default_kv_lease_ttl_ms>},
    {"default_kv_soft_pin_ttl_ms", &UintKey<&Config::default_kv_soft_pin_ttl_ms>},
    {"eviction_high_watermark_ratio", &RatioKey<&Config::eviction_high_watermark_ratio>},
    {"eviction_ratio", &RatioKey<&Config::eviction_ratio>},
    {"eviction_policy", &StringKey<&Config::eviction_policy>},
    {"put_start_discard_timeout_ms", &UintKey<&Config::put_start_discard_timeout_ms>},
    {"metadata_shards", &Uint32Key<&Config::metadata_shards, kMaxMetadataShards>},
    {"verify_checksum", &BoolKey<&Config::verify_checksum>},
    {"master_meta_channel", &BoolKey<&Config::master_meta_channel>},
    {"require_registered_buffers", &BoolKey<&Config::require_registered_buffers>},
    {"transfer_threads", &Uint32Key<&Config::transfer_threads, kMaxTransferThreads>},
    {"use_huge_pages", &BoolKey<&Config::use_huge_pages>},
    {"offload_paths", &PathListKey<&Config::offload_paths>},
    {"offload_capacity", &SizeKey<&Config::offload_capacity>},
    {"offload_region_size", &SizeKey<&Config::offload_region_size>},
    {"offload_eviction_policy", &StringKey<&Config::offload_eviction_policy>},
    {"offload_write_policy", &StringKey<&Config::offload_write_policy>},
    {"offload_io_engine", &StringKey<&Config::offload_io_engine>},
    {"offload_warm_restart", &BoolKey<&Config::offload_warm_restart>},
    {"offload_page_cache_reads", &BoolKey<&Config::offload_page_cache_reads>},
    {"offload_allow_buffered_io", &BoolKey<&Config::offload_allow_buffered_io>},
    {"offload_block_devices", &BoolKey<&Config::offload_block_devices>},
    {"staging_buffer_size", &SizeKey<&Config::staging_buffer_size>},
    {"staging_usable_ratio", &RatioKey<&Config::staging_usable_ratio>},
    {"staging_ttl_ms", &UintKey<&Config::staging_ttl_ms>},
    {"promote_on_hit", &BoolKey<&Config::promote_on_hit>},
    {"promote_min_hits", &Uint32Key<&Config::promote_min_hits, 1u << 20>},
};

std::optional<std::string_view> SuggestKey(std::string_view unknown) {
  const std::string lowered = Lower(unknown);
  std::optional<std::string_view> best;
  size_t best_distance = 3;  // suggest only within 2 edits
  for (const KeySpec& spec : kKeys) {
    const std::string_view known = spec.name;
    const size_t distance = EditDistance(lowered, known);
    if (distance < best_distance) {
      best_distance = distance;
      best = known;
    }
  }
  return best;
}

Status ApplyKey(const std::string& key, const Json& value, Config* config) {
  for (const KeySpec& spec : kKeys) {
    if (spec.name == key) return spec.apply(key, value, config);
  }
  std::string message = "unknown key " + Quote(key);
  if (std::optional<std::string_view> suggestion = SuggestKey(key)) {
    message += "; did you mean \"" + std::string(*suggestion) + "\"?";
  } else {
    message += "; see docs/configuration.md for the accepted keys";
  }
  return Invalid(std::move(message));
}

// Warnings for settings that are valid but probably not what the user meant.
void WarnAboutIgnoredSettings(const Config& config) {
  if (!config.device_name.empty() && config.protocol != "rdma") {
    spdlog::warn(
        "config: device_name {} is not used with protocol \"{}\": the tcp data plane listens on "
        "the store's --data-host address only and connects by the kernel's routes; device_name "
        "picks the NIC of protocol rdma",
        Quote(config.device_name), config.protocol);
  }
}

// The parser prefixes its messages with "[json.exception.parse_error.101] "; the
// id means nothing to a user.
std::string StripJsonExceptionPrefix(const std::string& what) {
  if (what.rfind("[json.exception.", 0) == 0) {
    const size_t end = what.find("] ");
    if (end != std::string::npos) return what.substr(end + 2);
  }
  return what;
}

Result<std::string> ReadWholeFile(const std::string& path) {
  errno = 0;
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    const int err = errno;
    return Invalid("cannot open config file \"" + path +
                   "\": " + std::generic_category().message(err));
  }
  errno = 0;
  std::string data;
  std::array<char, 16384> chunk;
  while (true) {
    const size_t n = std::fread(chunk.data(), 1, chunk.size(), file);
    data.append(chunk.data(), n);
    if (n < chunk.size()) break;
  }
  // errno is checked only when ferror says the read failed (e.g. EISDIR).
  const int err = errno;
  const bool failed = std::ferror(file) != 0;
  std::fclose(file);
  if (failed) {
    return Invalid("cannot read config file \"" + path +
                   "\": " + std::generic_category().message(err != 0 ? err : EIO));
  }
  return data;
}

Status ValidateOffload(const Config& config) {
  auto one_of = [](const std::string& key, const std::string& v,
                   std::initializer_list<std::string_view> allowed) -> Status {
    if (std::find(allowed.begin(), allowed.end(), v) != allowed.end()) return Status::Ok();
    std::string list;
    for (auto a : allowed) list += (list.empty() ? "\"" : ", \"") + std::string(a) + "\"";
    return KeyError(key, "unknown value " + Quote(v) + "; allowed values are " + list);
  };
  if (Status s = one_of("offload_eviction_policy", config.offload_eviction_policy, {"fifo", "lru"});
      !s.ok()) {
    return s;
  }
  if (Status s = one_of("offload_write_policy", config.offload_write_policy,
                        {"demote_on_evict", "write_behind"});
      !s.ok()) {
    return s;
  }
  if (Status s =
          one_of("offload_io_engine", config.offload_io_engine, {"auto", "io_uring", "posix"});
      !s.ok()) {
    return s;
  }
  if (config.offload_region_size % 4096 != 0 || config.offload_region_size < (uint64_t{1} << 20)) {
    return KeyError("offload_region_size", "must be a multiple of 4096 and at least 1MiB, got " +
                                               std::to_string(config.offload_region_size));
  }
  if (!(config.staging_usable_ratio > 0.0 && config.staging_usable_ratio <= 1.0)) {
    return KeyError("staging_usable_ratio",
                    "must be in (0, 1], got " + FormatDouble(config.staging_usable_ratio));
  }
  if (config.staging_ttl_ms == 0) return KeyError("staging_ttl_ms", "must be greater than 0");
  if (config.promote_min_hits == 0) return KeyError("promote_min_hits", "must be at least 1");
  if (!config.enable_offload) return Status::Ok();
  if (config.offload_paths.empty()) {
    return KeyError("offload_paths",
                    "enable_offload needs at least one tier file path (e.g. "
                    "[\"/mnt/nvme0/tierkv.tier\"])");
  }
  // A block device's capacity is its size (offload_capacity does not apply).
  if (!config.offload_block_devices && config.offload_capacity < config.offload_region_size) {
    return KeyError("offload_capacity", "must hold at least one region (offload_region_size " +
                                            std::to_string(config.offload_region_size) +
                                            " bytes), got " +
                                            std::to_string(config.offload_capacity));
  }
  // Larger objects stream through it in pieces; below 1 MiB the pieces get wastefully small.
  if (config.staging_buffer_size < (uint64_t{1} << 20)) {
    return KeyError("staging_buffer_size",
                    "must be at least 1MiB, got " + std::to_string(config.staging_buffer_size));
  }
  return Status::Ok();
}

// TIERKV_STAGING_USABLE_RATIO overrides staging_usable_ratio (strictly parsed);
// TIERKV_LOCAL_HOSTNAME and TIERKV_PREFERRED_SEGMENT override local_hostname and
// preferred_segment when set and not empty; TIERKV_CLUSTER_TOKEN_FILE sets cluster_token_file
// when the config names none.
Status ApplyEnvironment(Config* config) {
  if (const char* token = std::getenv("TIERKV_CLUSTER_TOKEN_FILE");
      token != nullptr && token[0] != 0 && config->cluster_token_file.empty()) {
    config->cluster_token_file = token;
  }
  if (const char* host = std::getenv("TIERKV_LOCAL_HOSTNAME"); host != nullptr && host[0] != 0) {
    config->local_hostname = host;
  }
  if (const char* seg = std::getenv("TIERKV_PREFERRED_SEGMENT"); seg != nullptr && seg[0] != 0) {
    config->preferred_segment = seg;
  }
  const char* ratio = std::getenv("TIERKV_STAGING_USABLE_RATIO");
  if (ratio == nullptr || ratio[0] == '\0') return Status::Ok();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(ratio, &end);
  if (errno != 0 || end == ratio || *end != '\0' || !(v > 0.0 && v <= 1.0)) {
    return Invalid(
        "environment variable TIERKV_STAGING_USABLE_RATIO: expected a number in (0, 1], got " +
        Quote(ratio));
  }
  config->staging_usable_ratio = v;
  return Status::Ok();
}

}  // namespace

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kEmbedded:
      return "embedded";
    case Mode::kStandaloneStore:
      return "standalone-store";
  }
  return "unknown";
}

Result<bool> ParseBool(std::string_view text) {
  const std::string lowered = Lower(text);
  if (lowered == "true") return true;
  if (lowered == "false") return false;
  return Result<bool>(ErrorCode::INVALID_CONFIG, "expected true or false, got " + Quote(text) +
                                                     " (1/0, yes/no and on/off are not accepted)");
}

Result<uint64_t> ParseSize(std::string_view text) {
  auto fail = [&](std::string_view why) {
    return Result<uint64_t>(ErrorCode::INVALID_CONFIG,
                            "invalid size " + Quote(text) + ": " + std::string(why));
  };
  std::string_view s = Trim(text);
  if (s.empty()) return fail("empty");
  if (s.front() == '-') return fail("a size must not be negative");

  size_t pos = 0;
  while (pos < s.size() && IsDigit(s[pos])) ++pos;
  const std::string_view int_digits = s.substr(0, pos);
  std::string_view frac_digits;
  if (pos < s.size() && s[pos] == '.') {
    const size_t frac_start = ++pos;
    while (pos < s.size() && IsDigit(s[pos])) ++pos;
    frac_digits = s.substr(frac_start, pos - frac_start);
    if (frac_digits.empty()) return fail("expected digits after the decimal point");
  }
  if (int_digits.empty()) return fail("expected a number such as \"80GB\" or \"1024\"");
  const std::string_view unit = Trim(s.substr(pos));

  static constexpr struct {
    std::string_view name;
    unsigned shift;
  } kUnits[] = {
      {"", 0},     {"b", 0},  {"k", 10},  {"kb", 10},  {"kib", 10}, {"m", 20},  {"mb", 20},
      {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30}, {"t", 40},   {"tb", 40}, {"tib", 40},
  };
  const std::string lowered_unit = Lower(unit);
  std::optional<unsigned> shift;
  for (const auto& u : kUnits) {
    if (u.name == lowered_unit) shift = u.shift;
  }
  if (!shift) {
    return fail("unknown unit " + Quote(unit) +
                " (use B, K, KB, KiB, M, MB, MiB, G, GB, GiB, T, TB or TiB; all 1024-based)");
  }

  const std::optional<uint64_t> whole = ParseDecimal(int_digits);
  if (!whole) return fail("too large for 64 bits");
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(*whole, uint64_t{1} << *shift, &bytes)) {
    return fail("too large for 64 bits");
  }

  // The fraction is computed exactly, in integers: F / 10^k of 2^shift bytes is a
  // whole number of bytes iff 5^k divides F and the remaining power of two fits.
  while (!frac_digits.empty() && frac_digits.back() == '0') frac_digits.remove_suffix(1);
  if (!frac_digits.empty()) {
    if (frac_digits.size() > 19) return fail("too many digits after the decimal point");
    const uint64_t frac = *ParseDecimal(frac_digits);  // < 10^19, cannot overflow
    const auto k = static_cast<unsigned>(frac_digits.size());
    uint64_t pow5 = 1;
    for (unsigned i = 0; i < k; ++i) pow5 *= 5;
    if (frac % pow5 != 0) return fail("not a whole number of bytes");
    const uint64_t halves = frac / pow5;  // < 2^k
    uint64_t frac_bytes = 0;
    if (k > *shift) {
      const uint64_t divisor = uint64_t{1} << (k - *shift);
      if (halves % divisor != 0) return fail("not a whole number of bytes");
      frac_bytes = halves / divisor;
    } else {
      frac_bytes = halves << (*shift - k);
    }
    if (__builtin_add_overflow(bytes, frac_bytes, &bytes)) return fail("too large for 64 bits");
  }
  return bytes;
}

Status ValidateConfig(const Config& config) {
  if (!config.cluster_accept_token_file.empty() && config.cluster_token_file.empty()) {
    return KeyError("cluster_accept_token_file",
                    "a second accepted token needs cluster_token_file (the token presented)");
  }
  if (config.data_tls_cert_file.empty() != config.data_tls_key_file.empty()) {
    return KeyError("data_tls_cert_file",
                    "data_tls_cert_file and data_tls_key_file go together (both or neither)");
  }
  if ((!config.data_tls_cert_file.empty() || !config.data_tls_ca_file.empty()) &&
      config.protocol == "rdma") {
    return KeyError("data_tls_ca_file",
                    "TLS on the data plane is tierkv's TCP transport's; "
                    "protocol \"rdma\" has none");
  }
  if (!config.segment_tenant.empty() && !IsTenantName(config.segment_tenant)) {
    return KeyError("segment_tenant", "a tenant's name: 1 to 64 characters of A-Z a-z 0-9 _ . -");
  }
  if (!config.cluster_token_file.empty() && config.protocol == "rdma") {
    return KeyError("cluster_token_file",
                    "protocol \"rdma\" cannot check the cluster token on its data port yet "
                    "(docs/security.md); use protocol \"tcp\" with a token");
  }
  if (config.mode != Mode::kEmbedded && config.mode != Mode::kStandaloneStore) {
    return KeyError("mode", "unknown mode " + std::to_string(static_cast<int>(config.mode)) +
                                "; allowed values are \"embedded\" and \"standalone-store\"");
  }
  if (config.mode == Mode::kEmbedded && config.global_segment_size == 0) {
    return KeyError("global_segment_size",
                    "embedded mode contributes a segment; set global_segment_size > 0 or use "
                    "mode standalone-store");
  }
  if (config.mode == Mode::kStandaloneStore && config.global_segment_size != 0) {
    return KeyError("global_segment_size",
                    "standalone-store mode contributes no segment (the store process owns the "
                    "memory); set global_segment_size to 0 or use mode embedded");
  }
  // local_hostname "host:port": a port that is all digits must be one (a larger number would
  // otherwise silently become part of the host name).
  if (const size_t colon = config.local_hostname.rfind(':');
      colon != std::string::npos && config.local_hostname.find(':') == colon &&
      colon + 1 < config.local_hostname.size() &&
      config.local_hostname.find_first_not_of("0123456789", colon + 1) == std::string::npos) {
    if (Status st = CheckHostPort(config.local_hostname, "local_hostname"); !st.ok()) {
      return Status(ErrorCode::INVALID_CONFIG, "config key " + st.message());
    }
  }
  if (!config.master_server_address.empty() &&
      config.master_server_address.rfind("etcd://", 0) != 0) {
    if (Status st = CheckHostPort(config.master_server_address, "master_server_address");
        !st.ok()) {
      return Status(ErrorCode::INVALID_CONFIG, "config key " + st.message());
    }
  }
  if (config.mode == Mode::kStandaloneStore && config.master_server_address.empty()) {
    // Only embedded mode can run the master in-process (see config.h).
    return KeyError("master_server_address",
                    "standalone-store mode needs an external master; set master_server_address");
  }
  if (config.local_buffer_size == 0) {
    return KeyError("local_buffer_size", "must be greater than 0");
  }
  if (constexpr uint64_t kYearMs = 365ull * 24 * 3600 * 1000;
      config.default_kv_soft_pin_ttl_ms > kYearMs) {
    return KeyError("default_kv_soft_pin_ttl_ms",
                    "must be at most " + std::to_string(kYearMs) + " (a year); 0 = no lapse");
  }
  static constexpr std::array<std::string_view, 4> kProtocols = {"tcp", "rdma", "shm", "auto"};
  if (std::find(kProtocols.begin(), kProtocols.end(), config.protocol) == kProtocols.end()) {
    return KeyError("protocol", "unknown protocol " + Quote(config.protocol) +
                                    "; allowed values are \"tcp\", \"rdma\", \"shm\" and \"auto\"");
  }
  if (!config.device_name.empty()) {
    std::string_view rest = config.device_name;
    while (true) {
      const size_t comma = rest.find(',');
      const std::string_view entry = rest.substr(0, comma);
      if (entry.empty()) {
        return KeyError("device_name",
                        "empty entry in the comma-separated list " + Quote(config.device_name));
      }
      if (std::any_of(entry.begin(), entry.end(), [](char c) { return IsSpace(c); })) {
        return KeyError("device_name", "entry " + Quote(entry) +
                                           " contains whitespace; write e.g. \"mlx5_0,mlx5_1\"");
      }
      if (comma == std::string_view::npos) break;
      rest.remove_prefix(comma + 1);
    }
  }
  // Written as !(in range) so that NaN is rejected too.
  if (!(config.eviction_high_watermark_ratio > 0.0 &&
        config.eviction_high_watermark_ratio <= 1.0)) {
    return KeyError("eviction_high_watermark_ratio",
                    "must be in (0, 1], got " + FormatDouble(config.eviction_high_watermark_ratio));
  }
  if (!(config.eviction_ratio > 0.0 && config.eviction_ratio <= 1.0)) {
    return KeyError("eviction_ratio",
                    "must be in (0, 1], got " + FormatDouble(config.eviction_ratio));
  }
  if (config.eviction_ratio > config.eviction_high_watermark_ratio) {
    // A pass starts at the watermark; it cannot free more than is in use there.
    return KeyError("eviction_high_watermark_ratio",
                    "must be at least eviction_ratio (" + FormatDouble(config.eviction_ratio) +
                        "), got " + FormatDouble(config.eviction_high_watermark_ratio));
  }
  if (config.eviction_policy != "lru" && config.eviction_policy != "reuse") {
    return KeyError("eviction_policy", "unknown policy " + Quote(config.eviction_policy) +
                                           "; allowed values are \"lru\" and \"reuse\"");
  }
  if (config.put_start_discard_timeout_ms == 0) {
    return KeyError("put_start_discard_timeout_ms", "must be greater than 0");
  }
  if (config.metadata_shards < 1 || config.metadata_shards > kMaxMetadataShards) {
    return KeyError("metadata_shards", "must be in 1.." + std::to_string(kMaxMetadataShards) +
                                           ", got " + std::to_string(config.metadata_shards));
  }
  if (Status s = ValidateOffload(config); !s.ok()) return s;
  if (config.transfer_threads > kMaxTransferThreads) {
    return KeyError("transfer_threads", "must be in 0.." + std::to_string(kMaxTransferThreads) +
                                            ", got " + std::to_string(config.transfer_threads));
  }
  return Status::Ok();
}

Result<Config> ParseConfig(std::string_view json_text) {
  InitLogging();  // warnings go to stderr with the project's format
  try {
    // The parser keeps the last of two equal keys silently; the callback notices.
    std::unordered_set<std::string> seen;
    std::optional<std::string> duplicate;
    Json::parser_callback_t on_event = [&](int depth, Json::parse_event_t event, Json& parsed) {
      if (depth == 1 && event == Json::parse_event_t::key && parsed.is_string()) {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!seen.insert(key).second && !duplicate) duplicate = key;
      }
      return true;
    };
    const Json doc = Json::parse(json_text.begin(), json_text.end(), on_event);
    if (!doc.is_object()) {
      return Invalid(std::string("the top level of the config must be a JSON object, got ") +
                     std::string(JsonTypeName(doc)));
    }
    if (duplicate) return KeyError(*duplicate, "the key appears more than once");
    Config config;
    for (const auto& [key, value] : doc.items()) {
      if (Status s = ApplyKey(key, value, &config); !s.ok()) return s;
    }
    if (Status s = ApplyEnvironment(&config); !s.ok()) return s;
    if (Status s = ValidateConfig(config); !s.ok()) return s;
    WarnAboutIgnoredSettings(config);
    return config;
  } catch (const nlohmann::json::exception& e) {
    return Invalid("invalid JSON: " + StripJsonExceptionPrefix(e.what()));
  } catch (const std::exception& e) {
    return Result<Config>(ErrorCode::INTERNAL_ERROR,
                          std::string("config parsing failed: ") + e.what());
  }
}

Result<Config> LoadConfigFile(const std::string& path) {
  Result<std::string> text = ReadWholeFile(path);
  if (!text.ok()) return text.status();
  Result<Config> config = ParseConfig(*text);
  if (!config.ok()) {
    return Status(config.code(), "config file \"" + path + "\": " + config.status().message());
  }
  spdlog::debug("config: loaded {}", path);
  return config;
}

Result<Config> LoadConfig(const std::string& explicit_path) {
  if (!explicit_path.empty()) return LoadConfigFile(explicit_path);
  // An empty TIERKV_CONFIG_PATH counts as unset, so `TIERKV_CONFIG_PATH= cmd` works.
  const char* env_path = std::getenv("TIERKV_CONFIG_PATH");
  if (env_path != nullptr && env_path[0] != '\0') return LoadConfigFile(env_path);
  Config config;
  if (Status s = ApplyEnvironment(&config); !s.ok()) return s;
  if (Status s = ValidateConfig(config); !s.ok()) return s;
  return config;
}

}  // namespace tierkv
