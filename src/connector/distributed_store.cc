// DistributedStore (include/tierkv/distributed_store.h): Mooncake's store semantics over a
// tierkv Client — set-up, buffers and the mapping of Mooncake's ReplicateConfig. The data calls
// are in distributed_store_data.cc, queries and removal in distributed_store_query.cc, tensors
// in distributed_store_tensor.cc; what they share in distributed_store_internal.h.
#include "tierkv/distributed_store.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "connector/distributed_store_internal.h"
#include "connector/tenant_client.h"
#include "tierkv/config.h"

namespace tierkv {

using dstore::Code;
using dstore::kOk;

namespace {

std::string ThisHost() {
  char buf[256] = {};
  return gethostname(buf, sizeof(buf) - 1) == 0 ? std::string(buf) : std::string("localhost");
}

// A size given as an int or a string such as "16MB" / "16 MB".
Result<uint64_t> JsonSize(const std::string& key, const nlohmann::json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer()) {
    return Status(ErrorCode::INVALID_CONFIG, "setup key '" + key + "' must not be negative");
  }
  if (v.is_string()) {
    auto size = ParseSize(v.get<std::string>());
    if (!size.ok())
      return Status(ErrorCode::INVALID_CONFIG,
                    "setup key '" + key + "': " + size.status().message());
    return size;
  }
  return Status(ErrorCode::INVALID_CONFIG, "setup key '" + key +
                                               "' must be a byte count or a size string such as "
                                               "\"16MB\", got " +
                                               v.dump());
}

Result<std::string> JsonString(const std::string& key, const nlohmann::json& v) {
  if (!v.is_string()) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "setup key '" + key + "' must be a string, got " + v.dump());
  }
  return v.get<std::string>();
}

Result<bool> JsonBool(const std::string& key, const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>();
  if (v.is_string()) {
    auto b = ParseBool(v.get<std::string>());
    if (b.ok()) return b;
  }
  return Status(ErrorCode::INVALID_CONFIG,
                "setup key '" + key + "' must be true or false, got " + v.dump());
}

}  // namespace

namespace dstore {

std::vector<std::vector<void*>> Ptrs(const std::vector<std::vector<uintptr_t>>& in) {
  std::vector<std::vector<void*>> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    out[i].reserve(in[i].size());
    for (uintptr_t p : in[i]) out[i].push_back(reinterpret_cast<void*>(p));
  }
  return out;
}

std::vector<std::vector<size_t>> Sizes(const std::vector<std::vector<uint64_t>>& in) {
  std::vector<std::vector<size_t>> out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i].assign(in[i].begin(), in[i].end());
  return out;
}

int FirstFailure(const std::vector<int>& codes) {
  for (int c : codes) {
    if (c != kOk) return c;
  }
  return kOk;
}

}  // namespace dstore

std::string StoreReplicateConfig::ToString() const {
  std::ostringstream os;
  static constexpr const char* kActions[] = {"PRESERVE", "ENABLE", "DISABLE"};
  os << "ReplicateConfig(replica_num=" << replica_num
     << ", with_hard_pin=" << (with_hard_pin ? "true" : "false")
     << ", with_soft_pin=" << (with_soft_pin ? "true" : "false")
     << ", soft_pin_action=" << kActions[static_cast<int>(soft_pin_action)] << ", soft_pin_ttl_ms="
     << (soft_pin_ttl_ms ? std::to_string(*soft_pin_ttl_ms) : std::string("None"))
     << ", preferred_segment=\"" << preferred_segment << "\", preferred_segments=[";
  for (size_t i = 0; i < preferred_segments.size(); ++i) {
    os << (i ? ", " : "") << '"' << preferred_segments[i] << '"';
  }
  os << "], prefer_alloc_in_same_node=" << (prefer_alloc_in_same_node ? "true" : "false")
     << ", group_ids=[";
  for (size_t i = 0; i < group_ids.size(); ++i) {
    os << (i ? ", " : "") << '"' << group_ids[i] << '"';
  }
  os << "], parent_keys=[";
  for (size_t i = 0; i < parent_keys.size(); ++i) {
    os << (i ? ", " : "") << '"' << parent_keys[i] << '"';
  }
  os << "])";
  return os.str();
}

DistributedStore::DistributedStore() = default;

DistributedStore::~DistributedStore() {
  Close();
  std::lock_guard lock(pool_mu_);
  for (const auto& [ptr, size] : pool_) munmap(ptr, size);
}

void DistributedStore::SetError(const std::string& message) const {
  spdlog::error("DistributedStore: {}", message);
  std::lock_guard lock(error_mu_);
  last_error_ = message;
}

std::string DistributedStore::last_error() const {
  std::lock_guard lock(error_mu_);
  return last_error_;
}

bool DistributedStore::is_setup() const {
  std::shared_lock lock(mu_);
  return client_ != nullptr;
}

// ---- set-up -------------------------------------------------------------------------------

int DistributedStore::Setup(const StoreSetupOptions& options) {
  std::unique_lock lock(mu_);
  auto fail = [&](ErrorCode code, const std::string& why) {
    SetError("setup: " + why);
    return Code(code);
  };
  if (client_) return fail(ErrorCode::INVALID_PARAMS, "already set up (close() first)");
  auto key_namespace = TenantKeyPrefix(options.tenant_id);
  if (!key_namespace.ok()) return fail(ErrorCode::INVALID_CONFIG, key_namespace.status().message());
  Config config;
  if (!options.extra_config_json.empty()) {
    auto parsed = ParseConfig(options.extra_config_json);
    if (!parsed.ok()) return fail(parsed.code(), parsed.status().message());
    config = *parsed;
  }
  config.local_hostname = options.local_hostname;
  config.metadata_server = options.metadata_server;
  config.global_segment_size = options.global_segment_size;
  // The core's local_buffer_size (a validated, unused staging hint) stays at its default when
  // the store's bounce buffer is 0, which Mooncake's setup accepts.
  if (options.local_buffer_size > 0) config.local_buffer_size = options.local_buffer_size;
  config.protocol = options.protocol;
  config.device_name = options.device_name;
  config.master_server_address = options.master_server_addr;
  if (!options.cluster_token_file.empty()) config.cluster_token_file = options.cluster_token_file;
  if (const char* env = std::getenv("TIERKV_CLUSTER_TOKEN_FILE");
      config.cluster_token_file.empty() && env != nullptr && env[0] != '\0') {
    config.cluster_token_file = env;
  }
  if (!options.master_server_addr.empty() && options.global_segment_size == 0) {
    config.mode = Mode::kStandaloneStore;
  }
  if (options.master_server_addr.empty() && options.global_segment_size == 0) {
    return fail(ErrorCode::INVALID_CONFIG,
                "global_segment_size 0 with no master_server_addr: an embedded store with an "
                "in-process master needs a segment of its own");
  }
  if (options.enable_ssd_offload) {
    config.enable_offload = true;
    // As Mooncake's clients: the argument, else MOONCAKE_OFFLOAD_FILE_STORAGE_PATH.
    std::string dir = options.ssd_offload_path;
    const char* env = std::getenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH");
    if (dir.empty() && env != nullptr) dir = env;
    if (!dir.empty()) {
      config.offload_paths = {dir + "/tierkv-" + std::to_string(getpid()) + ".tier"};
    } else if (config.offload_paths.empty() && options.master_server_addr.empty()) {
      // (With a remote master, the master's --root-fs-dir may give the directory: Client::Create
      // applies it, or names what is missing.)
      return fail(ErrorCode::INVALID_CONFIG,
                  "enable_ssd_offload needs a directory for the tier file: ssd_offload_path, or "
                  "MOONCAKE_OFFLOAD_FILE_STORAGE_PATH in the environment");
    }
  }
  {
    Config checked = config;  // a tier file the remote master names is checked by Client::Create
    if (checked.enable_offload && checked.offload_paths.empty()) checked.enable_offload = false;
    if (Status st = ValidateConfig(checked); !st.ok()) return fail(st.code(), st.message());
  }
  auto created = Client::Create(config);
  if (!created.ok()) return fail(created.code(), created.status().message());
  std::shared_ptr<Client> client = std::move(created).value();
  auto local = LocalBuffer::Create(options.local_buffer_size);
  if (!local.ok()) return fail(local.code(), local.status().message());
  if ((*local)->capacity() > 0) {
    if (Status st = client->RegisterBuffer((*local)->base(), (*local)->capacity()); !st.ok()) {
      return fail(st.code(), "registering the local buffer: " + st.message());
    }
  }
  client_ = key_namespace->empty()
                ? std::move(client)
                : std::make_shared<TenantClient>(std::move(client), *key_namespace);
  local_ = std::move(*local);
  hostname_ = options.local_hostname.empty() ? ThisHost() : options.local_hostname;
  spdlog::info("DistributedStore: set up ({}, segment {} bytes, local buffer {} bytes)",
               options.master_server_addr.empty() ? std::string("embedded")
                                                  : "master " + options.master_server_addr,
               options.global_segment_size, options.local_buffer_size);
  return kOk;
}

int DistributedStore::SetupFromJson(std::string_view json_object) {
  auto fail = [&](const std::string& why) {
    SetError("setup: " + why);
    return Code(ErrorCode::INVALID_CONFIG);
  };
  nlohmann::json doc = nlohmann::json::parse(json_object, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) return fail("the setup config must be a dict");
  StoreSetupOptions o;
  o.master_server_addr = "127.0.0.1:50051";  // Mooncake's default for the dict form
  bool have_hostname = false, have_metadata = false;
  nlohmann::json extra = nlohmann::json::object();
  for (const auto& [key, value] : doc.items()) {
    Status st;
    auto string_into = [&](std::string* out) {
      auto s = JsonString(key, value);
      if (s.ok()) *out = *s;
      return s.ok() ? Status::Ok() : s.status();
    };
    if (key == "local_hostname") {
      st = string_into(&o.local_hostname);
      have_hostname = true;
    } else if (key == "metadata_server") {
      st = string_into(&o.metadata_server);
      have_metadata = true;
    } else if (key == "global_segment_size" || key == "local_buffer_size") {
      auto size = JsonSize(key, value);
      if (size.ok()) {
        (key == "global_segment_size" ? o.global_segment_size : o.local_buffer_size) = *size;
      }
      st = size.ok() ? Status::Ok() : size.status();
    } else if (key == "protocol") {
      st = string_into(&o.protocol);
    } else if (key == "rdma_devices" || key == "device_name") {
      st = string_into(&o.device_name);
    } else if (key == "master_server_addr" || key == "master_server_address") {
      st = string_into(&o.master_server_addr);
    } else if (key == "enable_ssd_offload") {
      auto b = JsonBool(key, value);
      if (b.ok()) o.enable_ssd_offload = *b;
      st = b.ok() ? Status::Ok() : b.status();
    } else if (key == "ssd_offload_path") {
      st = string_into(&o.ssd_offload_path);
    } else if (key == "tenant_id") {
      st = string_into(&o.tenant_id);
    } else if (key == "token_file" || key == "cluster_token_file") {
      st = string_into(&o.cluster_token_file);
    } else if (key == "enable_client_http_server") {
      auto b = JsonBool(key, value);
      st = !b.ok() ? b.status()
           : *b    ? Status(ErrorCode::INVALID_CONFIG,
                            "setup key 'enable_client_http_server': tierkv clients serve no HTTP "
                               "endpoint (stores and the master do, see docs/metrics.md)")
                   : Status::Ok();
    } else {
      extra[key] = value;  // a tierkv Config key; ParseConfig names it if it is unknown
    }
    if (!st.ok()) return fail(st.message());
  }
  if (!have_hostname || !have_metadata) {
    return fail("the setup dict needs 'local_hostname' and 'metadata_server'");
  }
  if (!extra.empty()) o.extra_config_json = extra.dump();
  return Setup(o);
}

int DistributedStore::Close() {
  std::unique_lock lock(mu_);
  client_.reset();  // unmounts this store's segment
  {
    std::lock_guard sessions(session_mu_);
    sessions_.clear();
  }
  local_.reset();  // the mapping goes once no BufferHandle holds it
  {
    std::lock_guard reg(reg_mu_);
    registered_.clear();
  }
  return kOk;
}

int DistributedStore::HealthCheck() {
  std::shared_lock lock(mu_);
  if (!client_) return 1;
  const int probe = client_->BatchIsExist({"tierkv-health-check"})[0];
  return probe == Code(ErrorCode::RPC_FAIL) ? 2 : 0;
}

std::string DistributedStore::GetHostname() const {
  std::shared_lock lock(mu_);
  // The own segment's name (what preferred_segment takes: LMCache's prefer_local_alloc passes
  // this back), without the endpoints a served segment's mounted name carries after '@'.
  if (client_) {
    const std::string own = client_->LocalSegmentName();
    if (!own.empty()) return own.substr(0, own.find('@'));
  }
  return hostname_.empty() ? ThisHost() : hostname_;
}

// ---- buffers ------------------------------------------------------------------------------
int DistributedStore::RegisterBuffer(uintptr_t ptr, uint64_t size) {
  TIERKV_REQUIRE_CLIENT("register_buffer", Code(ErrorCode::INVALID_PARAMS));
  Status st = client_->RegisterBuffer(reinterpret_cast<void*>(ptr), size);
  if (!st.ok()) {
    spdlog::warn("register_buffer: {}", st.ToString());
    return Code(st.code());
  }
  std::lock_guard reg(reg_mu_);
  registered_[ptr] = size;
  return kOk;
}

int DistributedStore::UnregisterBuffer(uintptr_t ptr) {
  TIERKV_REQUIRE_CLIENT("unregister_buffer", Code(ErrorCode::INVALID_PARAMS));
  Status st = client_->UnregisterBuffer(reinterpret_cast<void*>(ptr));
  if (!st.ok()) {
    spdlog::warn("unregister_buffer: {}", st.ToString());
    return Code(st.code());
  }
  std::lock_guard reg(reg_mu_);
  registered_.erase(ptr);
  return kOk;
}

std::optional<std::pair<uintptr_t, uint64_t>> DistributedStore::RegisteredRange(
    uintptr_t ptr, uint64_t size) const {
  std::lock_guard reg(reg_mu_);
  auto it = registered_.upper_bound(ptr);
  if (it == registered_.begin()) return std::nullopt;
  --it;
  const uintptr_t start = it->first;
  const uint64_t len = it->second;
  if (ptr - start > len || size > len - (ptr - start)) return std::nullopt;
  return std::pair(start, len);
}

namespace dstore {

// A year: far past any cache's life, far from overflowing the master's clock arithmetic.
constexpr uint64_t kMaxSoftPinTtlMs = 365ull * 24 * 3600 * 1000;

Result<ReplicateConfig> ToCore(const StoreReplicateConfig& c, size_t keys, Client& client,
                               const std::string& hostname) {
  ReplicateConfig out;
  out.replica_num = c.replica_num;
  out.with_hard_pin = c.with_hard_pin;
  out.with_soft_pin = c.with_soft_pin || c.soft_pin_action == SoftPinAction::kEnable;
  if (c.soft_pin_action == SoftPinAction::kDisable) out.with_soft_pin = false;
  if (c.soft_pin_ttl_ms) {
    if (c.soft_pin_action != SoftPinAction::kEnable) {
      return Status(ErrorCode::INVALID_PARAMS,
                    "soft_pin_ttl_ms is valid only with soft_pin_action ENABLE");
    }
    if (*c.soft_pin_ttl_ms == 0) {
      out.with_soft_pin = false;  // Mooncake: a TTL of 0 commits the object as ordinary cache
    } else if (*c.soft_pin_ttl_ms > kMaxSoftPinTtlMs) {
      return Status(ErrorCode::INVALID_PARAMS,
                    "soft_pin_ttl_ms " + std::to_string(*c.soft_pin_ttl_ms) +
                        " is over the largest TTL, " + std::to_string(kMaxSoftPinTtlMs) + " ms");
    } else {
      out.soft_pin_ttl_ms = *c.soft_pin_ttl_ms;  // the pin lapses that long after the put
    }
  }
  out.preferred_segment = c.preferred_segment;
  if (c.preferred_segments.size() > 1) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "preferred_segments names " + std::to_string(c.preferred_segments.size()) +
                      " segments; tierkv places on at most one preferred segment");
  }
  if (c.preferred_segments.size() == 1) {
    if (!out.preferred_segment.empty() && out.preferred_segment != c.preferred_segments[0]) {
      return Status(ErrorCode::INVALID_PARAMS,
                    "preferred_segment and preferred_segments name different segments");
    }
    out.preferred_segment = c.preferred_segments[0];
  }
  if (c.prefer_alloc_in_same_node) {
    if (c.replica_num != 1) {
      return Status(ErrorCode::INVALID_PARAMS, "prefer_alloc_in_same_node needs replica_num 1");
    }
    if (!out.preferred_segment.empty()) {
      return Status(ErrorCode::INVALID_PARAMS,
                    "prefer_alloc_in_same_node and preferred_segment are exclusive");
    }
    // This client's own segment when it has one; else any segment of this host ("host:"
    // prefixes every segment name a process of this host mounts).
    const std::string own = client.LocalSegmentName();
    out.preferred_segment = own.empty() ? hostname + ":" : own;
  }
  if (!c.group_ids.empty() && c.group_ids.size() != keys) {
    return Status(ErrorCode::INVALID_PARAMS, "group_ids has " + std::to_string(c.group_ids.size()) +
                                                 " entries for " + std::to_string(keys) +
                                                 " keys (it must be empty or one per key)");
  }
  out.group_ids = c.group_ids;
  if (!c.parent_keys.empty() && c.parent_keys.size() != keys) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "parent_keys has " + std::to_string(c.parent_keys.size()) + " entries for " +
                      std::to_string(keys) + " keys (it must be empty or one per key)");
  }
  out.parent_keys = c.parent_keys;
  return out;
}

std::vector<int> ClientPut(Client& client, const std::vector<std::string>& keys,
                           const std::vector<std::vector<void*>>& ptrs,
                           const std::vector<std::vector<size_t>>& sizes,
                           const ReplicateConfig& config, bool upsert) {
  if (upsert) return client.BatchUpsertFromMultiBuffers(keys, ptrs, sizes, config);
  std::vector<int> codes = client.BatchPutFromMultiBuffers(keys, ptrs, sizes, config);
  // Mooncake's put semantics (client_service.cpp: "If error == object already exist, consider
  // as ok"): the key holds the first writer's bytes, and the caller's put has succeeded.
  for (int& c : codes) {
    if (c == Code(ErrorCode::OBJECT_ALREADY_EXISTS)) c = kOk;
  }
  return codes;
}

ReplicateConfig Subset(const ReplicateConfig& config, const std::vector<size_t>& keep) {
  ReplicateConfig out = config;
  if (!config.group_ids.empty()) {
    out.group_ids.clear();
    for (size_t i : keep) out.group_ids.push_back(config.group_ids[i]);
  }
  if (!config.parent_keys.empty()) {
    out.parent_keys.clear();
    for (size_t i : keep) out.parent_keys.push_back(config.parent_keys[i]);
  }
  return out;
}

void PutStaged(Client& client, Staged& staged, const ReplicateConfig& config, bool upsert,
               std::vector<int>& codes) {
  if (staged.keys.empty()) return;
  const std::vector<int> done = ClientPut(client, staged.keys, staged.ptrs, staged.sizes,
                                          Subset(config, staged.index), upsert);
  for (size_t j = 0; j < staged.index.size(); ++j) codes[staged.index[j]] = done[j];
}

}  // namespace dstore

}  // namespace tierkv
