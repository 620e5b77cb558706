#include "mooncake_flags.h"

#include <cstdint>
#include <map>
#include <optional>

namespace tierkv::cli {
namespace {

// How one Mooncake flag becomes tierkv flags: `tierkv` is the flag it sets (the value passed
// through, times `scale` for a unit change); a bool flag lists what true and false turn into.
// `refused` (no `tierkv` flag) is the message for a flag tierkv has no equivalent of.
struct MooncakeFlag {
  const char* tierkv = nullptr;
  int64_t scale = 1;
  bool is_bool = false;
  std::vector<std::string> if_true, if_false;
  const char* refused = nullptr;
};

MooncakeFlag Maps(const char* tierkv, int64_t scale = 1) {
  MooncakeFlag f;
  f.tierkv = tierkv;
  f.scale = scale;
  return f;
}
MooncakeFlag Bool(std::vector<std::string> if_true, std::vector<std::string> if_false) {
  MooncakeFlag f;
  f.is_bool = true;
  f.if_true = std::move(if_true);
  f.if_false = std::move(if_false);
  return f;
}
MooncakeFlag Special() { return MooncakeFlag{}; }  // handled by name below
MooncakeFlag Refused(const char* why, bool is_bool = false) {
  MooncakeFlag f;
  f.is_bool = is_bool;
  f.refused = why;
  return f;
}

const std::map<std::string, MooncakeFlag>& Flags() {
  static const auto* flags = new std::map<std::string, MooncakeFlag>{
      {"port", Maps("--port")},
      {"rpc_port", Maps("--port")},
      {"rpc_address", Maps("--host")},
      {"default_kv_lease_ttl", Maps("--lease-ttl-ms")},
      {"default_kv_soft_pin_ttl", Maps("--soft-pin-ttl-ms")},
      {"eviction_high_watermark_ratio", Maps("--high-watermark")},
      {"eviction_ratio", Maps("--eviction-ratio")},
      {"metrics_port", Maps("--metrics-port")},
      {"client_ttl", Maps("--client-ttl-ms", 1000)},
      {"put_start_discard_timeout_sec", Maps("--put-timeout-ms", 1000)},
      // Mooncake's HTTP metrics server runs with or without periodic reporting; false here also
      // turns off tierkv's, the one thing the flag can mean for a tierkv master.
      {"enable_metric_reporting", Bool({}, {"--metrics-port=-1"})},
      // enable_ha with its etcd connection string: tierkv's --ha etcd://...
      {"enable_ha", Special()},
      {"ha_backend_connstring", Special()},
      {"etcd_endpoints", Special()},
      {"ha_backend_type", Special()},
      {"allow_evict_soft_pinned_objects",
       Refused("tierkv always evicts soft-pinned objects last, once nothing unpinned is left "
               "(no setting keeps them instead)",
               true)},
      {"enable_offload",
       Refused("tierkv's SSD tier belongs to the store that owns the segment: enable_offload in "
               "that store's or client's config (docs/configuration.md), not a master flag",
               true)},
      {"offload_on_evict",
       Refused("a tierkv segment with an SSD tier always demotes instead of dropping on eviction "
               "(enable_offload in its store's config)",
               true)},
      // Told to clients at registration (RegisterClientResponse.defaults).
      {"promotion_on_hit", Bool({"--promote-on-hit"}, {})},
      {"promotion_admission_threshold", Maps("--promote-min-hits")},
      {"root_fs_dir", Maps("--root-fs-dir")},
      {"cluster_id",
       Refused("tierkv has no cluster id: the masters of one cluster share the etcd endpoints "
               "given to --ha")},
      {"max_threads", Refused("tierkv sizes its gRPC threads itself")},
      {"rpc_thread_num", Refused("tierkv sizes its gRPC threads itself")},
      {"enable_gc",
       Refused("tierkv has no object TTL garbage collector: objects leave by eviction or removal",
               true)},
      {"enable_http_metadata_server",
       Refused("tierkv needs no transfer-engine metadata server (clients find segments through "
               "the master)",
               true)},
      {"memory_allocator", Refused("tierkv's master has one allocator, an offset allocator")},
      {"rpc_conn_timeout_seconds",
       Refused("tierkv's gRPC server keeps its own connection limits (docs/security.md)")},
      {"rpc_enable_tcp_no_delay", Refused("tierkv's gRPC transport always sets TCP_NODELAY", true)},
      {"global_file_segment_size",
       Refused("tierkv has no shared-file (NFS/3FS) segment: each store owns its SSD tier")},
      {"http_metadata_server_port", Refused("tierkv needs no transfer-engine metadata server")},
      {"http_metadata_server_host", Refused("tierkv needs no transfer-engine metadata server")},
      {"enable_metadata_cleanup_on_timeout",
       Refused("tierkv needs no transfer-engine metadata server", true)},
      {"put_start_release_timeout_sec",
       Refused("tierkv releases an abandoned put's space when it discards it "
               "(--put-timeout-ms, Mooncake's --put_start_discard_timeout_sec)")},
      {"enable_disk_eviction",
       Refused("each store's SSD tier always evicts whole regions when full", true)},
      {"quota_bytes", Refused("tierkv's SSD tier size is the store's offload_capacity")},
      {"max_total_finished_tasks", Refused("tierkv has no task manager (copy/move tasks)")},
      {"max_total_pending_tasks", Refused("tierkv has no task manager (copy/move tasks)")},
      {"max_total_processing_tasks", Refused("tierkv has no task manager (copy/move tasks)")},
      {"pending_task_timeout_sec", Refused("tierkv has no task manager (copy/move tasks)")},
      {"processing_task_timeout_sec", Refused("tierkv has no task manager (copy/move tasks)")},
      {"config_path",
       Refused("tierkv master takes flags only; give the config file's settings as flags")},
  };
  return *flags;
}

Status Refuse(const std::string& name, const std::string& why) {
  return Status(ErrorCode::INVALID_PARAMS, "Mooncake flag --" + name + ": " + why);
}

Result<bool> ParseBoolValue(const std::string& name, const std::optional<std::string>& value) {
  if (!value) return true;  // a bare --name
  if (*value == "true" || *value == "1" || *value == "yes") return true;
  if (*value == "false" || *value == "0" || *value == "no") return false;
  return Refuse(name, "'" + *value + "' is not true or false");
}

}  // namespace

Result<std::vector<std::string>> TranslateMooncakeMasterFlags(
    const std::vector<std::string>& args) {
  std::vector<std::string> out;
  bool enable_ha = false;
  std::string ha_connstring;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    // gflags accepts -name as well as --name; tierkv's own flags use dashes, never '_'.
    const size_t dashes = arg.rfind("--", 0) == 0 ? 2 : (arg.rfind("-", 0) == 0 ? 1 : 0);
    const size_t eq = arg.find('=');
    const std::string name =
        dashes ? arg.substr(dashes, eq == std::string::npos ? eq : eq - dashes) : std::string();
    auto it = Flags().find(name);
    if (dashes == 0 || it == Flags().end() ||
        (name.find('_') == std::string::npos && dashes == 2 && name != "port")) {
      out.push_back(arg);  // tierkv's own (or unknown: CLI11 names it)
      continue;
    }
    const MooncakeFlag& flag = it->second;
    std::optional<std::string> value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (!flag.is_bool && i + 1 < args.size()) {
      value = args[++i];
    }
    if (flag.refused != nullptr)
      return Refuse(name, std::string("no tierkv equivalent: ") + flag.refused);
    if (name == "enable_ha") {
      auto b = ParseBoolValue(name, value);
      if (!b.ok()) return b.status();
      enable_ha = *b;
      continue;
    }
    if (!value) return Refuse(name, "needs a value");
    if (name == "rpc_port" && *value == "0") continue;  // Mooncake: 0 = use --port
    if (name == "ha_backend_connstring" || name == "etcd_endpoints") {
      ha_connstring = *value;
      continue;
    }
    if (name == "ha_backend_type") {
      if (*value != "etcd") return Refuse(name, "tierkv elects its leader through etcd only");
      continue;
    }
    if (flag.is_bool) {
      auto b = ParseBoolValue(name, value);
      if (!b.ok()) return b.status();
      for (const auto& a : *b ? flag.if_true : flag.if_false) out.push_back(a);
      continue;
    }
    std::string converted = *value;
    if (flag.scale != 1) {
      if (value->empty() || value->find_first_not_of("0123456789") != std::string::npos) {
        return Refuse(name, "'" + *value + "' is not a whole number");
      }
      converted = std::to_string(std::stoll(*value) * flag.scale);
    }
    out.push_back(std::string(flag.tierkv) + "=" + converted);
  }
  if (enable_ha) {
    if (ha_connstring.empty()) {
      return Refuse("enable_ha",
                    "needs --ha_backend_connstring (or --etcd_endpoints): the etcd "
                    "endpoints, host:port[;host:port]");
    }
    std::string endpoints = ha_connstring;
    if (endpoints.rfind("etcd://", 0) == 0) endpoints = endpoints.substr(7);
    for (char& c : endpoints) {
      if (c == ',') c = ';';
    }
    out.push_back("--ha=etcd://" + endpoints);
  }
  return out;
}

}  // namespace tierkv::cli
