#include "transport/device_select.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

namespace tierkv::transport {
namespace {

// Quotes a user-supplied string for a message; control characters become \xNN so that they
// cannot garble the log line.
std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned char>(c));
      out += buf;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

Status DeviceError(std::string message) {
  return Status(ErrorCode::INVALID_CONFIG, "device_name: " + std::move(message));
}

std::vector<std::string_view> SplitCommas(std::string_view list) {
  std::vector<std::string_view> entries;
  while (true) {
    const size_t comma = list.find(',');
    entries.push_back(list.substr(0, comma));
    if (comma == std::string_view::npos) return entries;
    list.remove_prefix(comma + 1);
  }
}

// A non-negative decimal int with nothing around it; nullopt otherwise.
std::optional<int> ParseIndex(std::string_view s) {
  int value = 0;
  if (s.empty() || s.front() == '-' || s.front() == '+') return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

bool IsBlank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

// The NICs of a non-empty device_name; INVALID_CONFIG on an empty or blank entry.
Result<std::vector<std::string_view>> ParseNics(std::string_view device_name) {
  std::vector<std::string_view> nics = SplitCommas(device_name);
  for (const std::string_view nic : nics) {
    if (nic.empty()) {
      return DeviceError("empty entry in the comma-separated list " + Quote(device_name));
    }
    for (const char c : nic) {
      if (IsBlank(c)) {
        return DeviceError("entry " + Quote(nic) + " of " + Quote(device_name) +
                           " contains whitespace; write e.g. \"mlx5_0,mlx5_1\"");
      }
    }
  }
  return nics;
}

}  // namespace

Result<std::string> SelectDevice(std::string_view device_name,
                                 std::optional<std::string_view> cuda_visible_devices,
                                 int local_rank) {
  if (device_name.empty()) return std::string();
  Result<std::vector<std::string_view>> parsed = ParseNics(device_name);
  if (!parsed.ok()) return parsed.status();
  const std::vector<std::string_view>& nics = *parsed;
  if (nics.size() == 1) return std::string(nics.front());

  const std::string list = Quote(device_name);
  if (local_rank < 0) {
    return DeviceError(list + ": local rank " + std::to_string(local_rank) + " is negative");
  }
  int gpu = local_rank;
  std::string origin;  // where `gpu` came from, for the messages
  if (cuda_visible_devices.has_value()) {
    const std::string cvd = "CUDA_VISIBLE_DEVICES=" + Quote(*cuda_visible_devices);
    if (cuda_visible_devices->empty()) {
      return DeviceError(list + ": " + cvd + " hides every GPU, so local rank " +
                         std::to_string(local_rank) +
                         " has no physical GPU index to pick a NIC by; make a GPU visible or "
                         "give device_name a single NIC");
    }
    const std::vector<std::string_view> visible = SplitCommas(*cuda_visible_devices);
    if (static_cast<size_t>(local_rank) >= visible.size()) {
      return DeviceError(list + ": local rank " + std::to_string(local_rank) + " has no entry in " +
                         cvd + " (" + std::to_string(visible.size()) + " entries)");
    }
    const std::string_view entry = visible[static_cast<size_t>(local_rank)];
    const std::string where = "entry " + std::to_string(local_rank) + " of " + cvd +
                              " (the local rank's GPU), " + Quote(entry) + ",";
    if (entry.starts_with("GPU-") || entry.starts_with("MIG-")) {
      return DeviceError(list + ": " + where +
                         " is a GPU UUID; NIC selection needs integer GPU indices in "
                         "CUDA_VISIBLE_DEVICES (e.g. \"0,1\"), or a single NIC in device_name");
    }
    const std::optional<int> index = ParseIndex(entry);
    if (!index.has_value()) {
      return DeviceError(list + ": " + where + " is not a GPU index (a non-negative integer)");
    }
    gpu = *index;
    origin = "entry " + std::to_string(local_rank) + " of " + cvd + " for local rank " +
             std::to_string(local_rank);
  } else {
    origin = "the local rank; CUDA_VISIBLE_DEVICES is unset";
  }
  if (static_cast<size_t>(gpu) >= nics.size()) {
    return DeviceError(list + " has " + std::to_string(nics.size()) +
                       " entries, but this rank's physical GPU index is " + std::to_string(gpu) +
                       " (" + origin + "); list one NIC per GPU index 0.." + std::to_string(gpu) +
                       ", or a single NIC for every rank");
  }
  return std::string(nics[static_cast<size_t>(gpu)]);
}

Result<LocalRank> LocalRankFromEnv() {
  for (const char* name : {"LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"}) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') continue;
    const std::optional<int> rank = ParseIndex(value);
    if (!rank.has_value()) {
      return Status(ErrorCode::INVALID_CONFIG, std::string(name) + "=" + Quote(value) +
                                                   ": the local rank must be an integer in "
                                                   "0..2147483647");
    }
    return LocalRank{*rank, name};
  }
  return LocalRank{0, "default"};
}

Result<std::string> SelectDeviceFromEnv(std::string_view device_name) {
  if (device_name.empty()) return std::string();
  // A bad list is reported before a bad rank variable; a single NIC needs no rank at all.
  Result<std::vector<std::string_view>> nics = ParseNics(device_name);
  if (!nics.ok()) return nics.status();
  if (nics->size() == 1) return std::string(nics->front());
  Result<LocalRank> rank = LocalRankFromEnv();
  if (!rank.ok()) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "device_name " + Quote(device_name) +
                      " is a list, so the local rank is needed: " + rank.status().message());
  }
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  Result<std::string> nic = SelectDevice(
      device_name, cvd ? std::optional<std::string_view>(cvd) : std::nullopt, rank->rank);
  if (nic.ok()) return nic;
  const std::string from =
      rank->source == "default"
          ? "none of LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID "
            "is set, so the local rank is 0"
          : "the local rank " + std::to_string(rank->rank) + " is from " + rank->source;
  return Status(ErrorCode::INVALID_CONFIG, nic.status().message() + "; " + from);
}

}  // namespace tierkv::transport
