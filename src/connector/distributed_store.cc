// DistributedStore (include/tierkv/distributed_store.h): Mooncake's store semantics over a
// tierkv Client. The local buffer is one anonymous mapping, pre-faulted and registered with
// the client, carved by an OffsetAllocator; a span of it is an owning handle that keeps the
// mapping alive, so a BufferHandle outlives Close().
#include "tierkv/distributed_store.h"

#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <sstream>

#include "memory/offset_allocator.h"
#include "tierkv/client.h"
#include "tierkv/config.h"

namespace tierkv {

// The per-store bounce buffer (Mooncake's local buffer).
class LocalBuffer : public std::enable_shared_from_this<LocalBuffer> {
 public:
  struct Span {
    std::shared_ptr<LocalBuffer> owner;  // declared first: destroyed after `alloc` frees
    Allocation alloc;
    uint8_t* ptr = nullptr;
  };

  static Result<std::shared_ptr<LocalBuffer>> Create(uint64_t size) {
    auto buffer = std::shared_ptr<LocalBuffer>(new LocalBuffer(size));
    if (size == 0) return buffer;
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (p == MAP_FAILED) {
      return Status(ErrorCode::INTERNAL_ERROR, "cannot map a local buffer of " +
                                                   std::to_string(size) +
                                                   " bytes: " + std::strerror(errno));
    }
    buffer->base_ = static_cast<uint8_t*>(p);
    buffer->allocator_ = OffsetAllocator::Create(size, 64);
    return buffer;
  }
  ~LocalBuffer() {
    if (base_ != nullptr) munmap(base_, capacity_);
  }

  uint8_t* base() const { return base_; }
  uint64_t capacity() const { return capacity_; }

  // A span of `size` bytes, or BUFFER_OVERFLOW naming what is free.
  Result<Span> Allocate(uint64_t size) {
    std::optional<Allocation> a = allocator_ ? allocator_->Allocate(size) : std::nullopt;
    if (!a) {
      return Status(ErrorCode::BUFFER_OVERFLOW,
                    "the local buffer (local_buffer_size " + std::to_string(capacity_) + ", " +
                        std::to_string(allocator_ ? allocator_->used() : 0) +
                        " in use) cannot hold " + std::to_string(size) + " bytes");
    }
    Span span;
    span.owner = shared_from_this();
    span.ptr = base_ + a->offset();
    span.alloc = std::move(*a);
    return span;
  }

 private:
  explicit LocalBuffer(uint64_t size) : capacity_(size) {}
  const uint64_t capacity_;
  uint8_t* base_ = nullptr;
  std::shared_ptr<OffsetAllocator> allocator_;
};

namespace {

using Span = LocalBuffer::Span;
constexpr int kOk = 0;

int Code(ErrorCode code) { return ToInt(code); }

class SpanHandle final : public BufferHandle {
 public:
  SpanHandle(Span span, size_t size) : span_(std::move(span)), size_(size) {}
  const uint8_t* data() const override { return span_.ptr; }
  size_t size() const override { return size_; }

 private:
  Span span_;
  size_t size_;
};

std::string ThisHost() {
  char buf[256] = {};
  return gethostname(buf, sizeof(buf) - 1) == 0 ? std::string(buf) : std::string("localhost");
}

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

DistributedStore::~DistributedStore() { Close(); }

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
    if (!options.ssd_offload_path.empty()) {
      config.offload_paths = {options.ssd_offload_path + "/tierkv-" + std::to_string(getpid()) +
                              ".tier"};
    } else if (config.offload_paths.empty()) {
      return fail(ErrorCode::INVALID_CONFIG,
                  "enable_ssd_offload needs ssd_offload_path (a directory for the tier file)");
    }
  }
  if (Status st = ValidateConfig(config); !st.ok()) return fail(st.code(), st.message());
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
  client_ = std::move(client);
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
      std::string tenant;
      st = string_into(&tenant);
      if (st.ok() && tenant != "default") {
        st = Status(ErrorCode::INVALID_CONFIG,
                    "setup key 'tenant_id': only \"default\" is supported, got \"" + tenant + "\"");
      }
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
  local_.reset();   // the mapping goes once no BufferHandle holds it
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
  return hostname_.empty() ? ThisHost() : hostname_;
}

// ---- buffers ------------------------------------------------------------------------------

#define TIERKV_REQUIRE_CLIENT(call, ret)                                          \
  std::shared_lock lock(mu_);                                                     \
  if (!client_) {                                                                 \
    SetError(std::string(call) + ": the store is not set up (call setup first)"); \
    return ret;                                                                   \
  }

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

// ---- config mapping -----------------------------------------------------------------------

namespace {

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
    } else {
      return Status(ErrorCode::INVALID_PARAMS,
                    "soft_pin_ttl_ms > 0 is not supported: tierkv soft pins last until the "
                    "object is removed (leave it None)");
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

// Puts objects from pieces through the client (registered memory).
std::vector<int> ClientPut(Client& client, const std::vector<std::string>& keys,
                           const std::vector<std::vector<void*>>& ptrs,
                           const std::vector<std::vector<size_t>>& sizes,
                           const ReplicateConfig& config, bool upsert) {
  return upsert ? client.BatchUpsertFromMultiBuffers(keys, ptrs, sizes, config)
                : client.BatchPutFromMultiBuffers(keys, ptrs, sizes, config);
}

// The subset of `config` for the keys at `keep` (group ids and parent keys follow their keys).
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

// Objects staged in local-buffer spans, put in one batch: keys whose span could not be had
// already carry their code in `codes`.
struct Staged {
  std::vector<size_t> index;
  std::vector<std::string> keys;
  std::vector<std::vector<void*>> ptrs;
  std::vector<std::vector<size_t>> sizes;
  std::vector<Span> spans;
};

void PutStaged(Client& client, Staged& staged, const ReplicateConfig& config, bool upsert,
               std::vector<int>& codes) {
  if (staged.keys.empty()) return;
  const std::vector<int> done = ClientPut(client, staged.keys, staged.ptrs, staged.sizes,
                                          Subset(config, staged.index), upsert);
  for (size_t j = 0; j < staged.index.size(); ++j) codes[staged.index[j]] = done[j];
}

}  // namespace

// ---- bytes through the local buffer -------------------------------------------------------

namespace {

std::vector<int> PutBytesImpl(Client& client, LocalBuffer& local,
                              const std::vector<std::string>& keys,
                              const std::vector<std::vector<std::span<const uint8_t>>>& values,
                              const ReplicateConfig& config, bool upsert) {
  std::vector<int> codes(keys.size(), kOk);
  Staged staged;
  for (size_t i = 0; i < keys.size(); ++i) {
    uint64_t total = 0;
    for (const auto& part : values[i]) total += part.size();
    if (total == 0) {
      codes[i] = Code(ErrorCode::INVALID_PARAMS);  // objects are never empty
      continue;
    }
    auto span = local.Allocate(total);
    if (!span.ok()) {
      spdlog::warn("put of {}: {}", keys[i], span.status().message());
      codes[i] = Code(span.code());
      continue;
    }
    uint8_t* at = span->ptr;
    for (const auto& part : values[i]) {
      if (!part.empty()) std::memcpy(at, part.data(), part.size());
      at += part.size();
    }
    staged.index.push_back(i);
    staged.keys.push_back(keys[i]);
    staged.ptrs.push_back({span->ptr});
    staged.sizes.push_back({static_cast<size_t>(total)});
    staged.spans.push_back(std::move(*span));
  }
  PutStaged(client, staged, config, upsert, codes);
  return codes;
}

// Reads objects into local-buffer spans, each sized by the client once it knows the size of
// the version it reads (one master call: an upsert in between cannot make a span too small).
std::vector<Result<std::shared_ptr<const BufferHandle>>> GetBuffers(
    Client& client, LocalBuffer& local, const std::vector<std::string>& keys) {
  std::vector<std::optional<Span>> spans(keys.size());
  std::vector<Status> alloc_failed(keys.size());
  const std::vector<int64_t> got =
      client.BatchGetAllocated(keys, [&](size_t i, uint64_t size) -> void* {
        auto span = local.Allocate(size);
        if (!span.ok()) {
          spdlog::warn("get of {}: {}", keys[i], span.status().message());
          alloc_failed[i] = span.status();
          return nullptr;
        }
        void* ptr = span->ptr;
        spans[i] = std::move(*span);
        return ptr;
      });
  std::vector<Result<std::shared_ptr<const BufferHandle>>> out;
  out.reserve(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (got[i] >= 0 && spans[i]) {
      out.emplace_back(std::shared_ptr<const BufferHandle>(
          std::make_shared<SpanHandle>(std::move(*spans[i]), static_cast<size_t>(got[i]))));
    } else if (!alloc_failed[i].ok()) {
      out.emplace_back(alloc_failed[i]);
    } else {
      out.emplace_back(
          static_cast<ErrorCode>(got[i] < 0 ? got[i] : ToInt(ErrorCode::INTERNAL_ERROR)),
          "reading " + keys[i]);
    }
  }
  return out;
}

}  // namespace

int DistributedStore::Put(const std::string& key, std::span<const uint8_t> value,
                          const StoreReplicateConfig& config) {
  return PutParts(key, {value}, config);
}

int DistributedStore::PutParts(const std::string& key,
                               const std::vector<std::span<const uint8_t>>& parts,
                               const StoreReplicateConfig& config) {
  return WriteParts("put", key, parts, config, /*upsert=*/false);
}

int DistributedStore::PutBatch(const std::vector<std::string>& keys,
                               const std::vector<std::span<const uint8_t>>& values,
                               const StoreReplicateConfig& config) {
  return WriteBatch("put_batch", keys, values, config, /*upsert=*/false);
}

int DistributedStore::Upsert(const std::string& key, std::span<const uint8_t> value,
                             const StoreReplicateConfig& config) {
  return UpsertParts(key, {value}, config);
}

int DistributedStore::UpsertParts(const std::string& key,
                                  const std::vector<std::span<const uint8_t>>& parts,
                                  const StoreReplicateConfig& config) {
  return WriteParts("upsert", key, parts, config, /*upsert=*/true);
}

int DistributedStore::UpsertBatch(const std::vector<std::string>& keys,
                                  const std::vector<std::span<const uint8_t>>& values,
                                  const StoreReplicateConfig& config) {
  return WriteBatch("upsert_batch", keys, values, config, /*upsert=*/true);
}

int DistributedStore::WriteParts(const char* call, const std::string& key,
                                 const std::vector<std::span<const uint8_t>>& parts,
                                 const StoreReplicateConfig& config, bool upsert) {
  TIERKV_REQUIRE_CLIENT(call, Code(ErrorCode::INVALID_PARAMS));
  auto core = ToCore(config, 1, *client_, hostname_);
  if (!core.ok()) {
    SetError(std::string(call) + ": " + core.status().message());
    return Code(core.code());
  }
  return PutBytesImpl(*client_, *local_, {key}, {parts}, *core, upsert)[0];
}

int DistributedStore::WriteBatch(const char* call, const std::vector<std::string>& keys,
                                 const std::vector<std::span<const uint8_t>>& values,
                                 const StoreReplicateConfig& config, bool upsert) {
  TIERKV_REQUIRE_CLIENT(call, Code(ErrorCode::INVALID_PARAMS));
  if (keys.size() != values.size()) {
    SetError(std::string(call) + ": " + std::to_string(keys.size()) + " keys but " +
             std::to_string(values.size()) + " values");
    return Code(ErrorCode::INVALID_PARAMS);
  }
  auto core = ToCore(config, keys.size(), *client_, hostname_);
  if (!core.ok()) {
    SetError(std::string(call) + ": " + core.status().message());
    return Code(core.code());
  }
  std::vector<std::vector<std::span<const uint8_t>>> parts;
  parts.reserve(values.size());
  for (const auto& v : values) parts.push_back({v});
  return FirstFailure(PutBytesImpl(*client_, *local_, keys, parts, *core, upsert));
}

Result<std::shared_ptr<const BufferHandle>> DistributedStore::GetBuffer(const std::string& key) {
  return std::move(BatchGetBuffer({key})[0]);
}

std::vector<Result<std::shared_ptr<const BufferHandle>>> DistributedStore::BatchGetBuffer(
    const std::vector<std::string>& keys) {
  using Out = std::vector<Result<std::shared_ptr<const BufferHandle>>>;
  TIERKV_REQUIRE_CLIENT("get",
                        Out(keys.size(), Status(ErrorCode::INVALID_PARAMS, "store not set up")));
  return GetBuffers(*client_, *local_, keys);
}

// ---- zero-copy ----------------------------------------------------------------------------

int DistributedStore::PutFrom(const std::string& key, uintptr_t ptr, uint64_t size,
                              const StoreReplicateConfig& config) {
  return BatchPutFromMultiBuffers({key}, {{ptr}}, {{size}}, config)[0];
}

std::vector<int> DistributedStore::BatchPutFrom(const std::vector<std::string>& keys,
                                                const std::vector<uintptr_t>& ptrs,
                                                const std::vector<uint64_t>& sizes,
                                                const StoreReplicateConfig& config) {
  std::vector<std::vector<uintptr_t>> p;
  std::vector<std::vector<uint64_t>> s;
  for (size_t i = 0; i < keys.size(); ++i) {
    p.push_back(i < ptrs.size() ? std::vector<uintptr_t>{ptrs[i]} : std::vector<uintptr_t>{});
    s.push_back(i < sizes.size() ? std::vector<uint64_t>{sizes[i]} : std::vector<uint64_t>{});
  }
  return BatchPutFromMultiBuffers(keys, p, s, config);
}

int DistributedStore::UpsertFrom(const std::string& key, uintptr_t ptr, uint64_t size,
                                 const StoreReplicateConfig& config) {
  return BatchUpsertFromMultiBuffers({key}, {{ptr}}, {{size}}, config)[0];
}

std::vector<int> DistributedStore::BatchUpsertFrom(const std::vector<std::string>& keys,
                                                   const std::vector<uintptr_t>& ptrs,
                                                   const std::vector<uint64_t>& sizes,
                                                   const StoreReplicateConfig& config) {
  std::vector<std::vector<uintptr_t>> p;
  std::vector<std::vector<uint64_t>> s;
  for (size_t i = 0; i < keys.size(); ++i) {
    p.push_back(i < ptrs.size() ? std::vector<uintptr_t>{ptrs[i]} : std::vector<uintptr_t>{});
    s.push_back(i < sizes.size() ? std::vector<uint64_t>{sizes[i]} : std::vector<uint64_t>{});
  }
  return BatchUpsertFromMultiBuffers(keys, p, s, config);
}

namespace {

// Lists of the wrong length fail every key (the shapes do not say which key a piece is for).
bool ShapesMatch(size_t keys, size_t ptrs, size_t sizes) { return ptrs == keys && sizes == keys; }

}  // namespace

std::vector<int> DistributedStore::BatchPutFromMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<uintptr_t>>& ptrs,
    const std::vector<std::vector<uint64_t>>& sizes, const StoreReplicateConfig& config) {
  TIERKV_REQUIRE_CLIENT("batch_put_from_multi_buffers",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  if (!ShapesMatch(keys.size(), ptrs.size(), sizes.size())) {
    SetError("batch_put_from: lists of different lengths");
    return std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  auto core = ToCore(config, keys.size(), *client_, hostname_);
  if (!core.ok()) {
    SetError("batch_put_from: " + core.status().message());
    return std::vector<int>(keys.size(), Code(core.code()));
  }
  return client_->BatchPutFromMultiBuffers(keys, Ptrs(ptrs), Sizes(sizes), *core);
}

std::vector<int> DistributedStore::BatchUpsertFromMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<uintptr_t>>& ptrs,
    const std::vector<std::vector<uint64_t>>& sizes, const StoreReplicateConfig& config) {
  TIERKV_REQUIRE_CLIENT("batch_upsert_from",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  if (!ShapesMatch(keys.size(), ptrs.size(), sizes.size())) {
    SetError("batch_upsert_from: lists of different lengths");
    return std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  auto core = ToCore(config, keys.size(), *client_, hostname_);
  if (!core.ok()) {
    SetError("batch_upsert_from: " + core.status().message());
    return std::vector<int>(keys.size(), Code(core.code()));
  }
  return client_->BatchUpsertFromMultiBuffers(keys, Ptrs(ptrs), Sizes(sizes), *core);
}

int64_t DistributedStore::GetInto(const std::string& key, uintptr_t ptr, uint64_t capacity) {
  return BatchGetInto({key}, {ptr}, {capacity})[0];
}

std::vector<int64_t> DistributedStore::BatchGetInto(const std::vector<std::string>& keys,
                                                    const std::vector<uintptr_t>& ptrs,
                                                    const std::vector<uint64_t>& capacities) {
  TIERKV_REQUIRE_CLIENT("batch_get_into",
                        std::vector<int64_t>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  if (!ShapesMatch(keys.size(), ptrs.size(), capacities.size())) {
    SetError("batch_get_into: lists of different lengths");
    return std::vector<int64_t>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  std::vector<void*> bufs;
  for (uintptr_t p : ptrs) bufs.push_back(reinterpret_cast<void*>(p));
  return client_->BatchGetInto(keys, bufs,
                               std::vector<size_t>(capacities.begin(), capacities.end()));
}

std::vector<int64_t> DistributedStore::BatchGetIntoMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<uintptr_t>>& ptrs,
    const std::vector<std::vector<uint64_t>>& sizes) {
  TIERKV_REQUIRE_CLIENT("batch_get_into_multi_buffers",
                        std::vector<int64_t>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  if (!ShapesMatch(keys.size(), ptrs.size(), sizes.size())) {
    SetError("batch_get_into_multi_buffers: lists of different lengths");
    return std::vector<int64_t>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  return client_->BatchGetIntoMultiBuffers(keys, Ptrs(ptrs), Sizes(sizes));
}

std::vector<std::vector<std::vector<int64_t>>> DistributedStore::GetIntoRanges(
    const std::vector<uintptr_t>& buffer_ptrs, const std::vector<std::vector<std::string>>& keys,
    const std::vector<std::vector<std::vector<uint64_t>>>& dst_offsets,
    const std::vector<std::vector<std::vector<uint64_t>>>& src_offsets,
    const std::vector<std::vector<std::vector<uint64_t>>>& sizes) {
  // Results shaped like `sizes` where it can be, else like `keys`.
  std::vector<std::vector<std::vector<int64_t>>> out(buffer_ptrs.size());
  auto fill_all = [&](int code) {
    for (size_t i = 0; i < buffer_ptrs.size(); ++i) {
      const size_t nk = i < keys.size() ? keys[i].size() : 0;
      out[i].assign(nk, {});
      for (size_t j = 0; j < nk; ++j) {
        const size_t nf = i < sizes.size() && j < sizes[i].size() ? sizes[i][j].size() : 1;
        out[i][j].assign(nf, code);
      }
    }
    return out;
  };
  TIERKV_REQUIRE_CLIENT("get_into_ranges", fill_all(Code(ErrorCode::INVALID_PARAMS)));
  const size_t nb = buffer_ptrs.size();
  if (keys.size() != nb || dst_offsets.size() != nb || src_offsets.size() != nb ||
      sizes.size() != nb) {
    SetError("get_into_ranges: the five lists must have one entry per buffer");
    return fill_all(Code(ErrorCode::INVALID_PARAMS));
  }
  // Every distinct key once, through the local buffer.
  std::vector<std::string> unique;
  std::map<std::string, size_t> slot;
  for (const auto& per_buffer : keys) {
    for (const auto& k : per_buffer) {
      if (slot.emplace(k, unique.size()).second) unique.push_back(k);
    }
  }
  auto objects = GetBuffers(*client_, *local_, unique);
  for (size_t i = 0; i < nb; ++i) {
    const size_t nk = keys[i].size();
    out[i].assign(nk, {});
    const auto reg = RegisteredRange(buffer_ptrs[i], 0);
    const uint64_t room = reg ? reg->second - (buffer_ptrs[i] - reg->first) : 0;
    const bool shape_ok =
        dst_offsets[i].size() == nk && src_offsets[i].size() == nk && sizes[i].size() == nk;
    for (size_t j = 0; j < nk; ++j) {
      const bool frag_ok = shape_ok && dst_offsets[i][j].size() == sizes[i][j].size() &&
                           src_offsets[i][j].size() == sizes[i][j].size();
      const size_t nf = shape_ok && j < sizes[i].size() ? sizes[i][j].size() : 1;
      out[i][j].assign(nf, Code(ErrorCode::INVALID_PARAMS));
      if (!frag_ok || !reg) continue;
      const auto& obj = objects[slot[keys[i][j]]];
      for (size_t k = 0; k < nf; ++k) {
        const uint64_t dst = dst_offsets[i][j][k], src = src_offsets[i][j][k], len = sizes[i][j][k];
        if (!obj.ok()) {
          out[i][j][k] = Code(obj.code());
        } else if (dst > room || len > room - dst) {
          out[i][j][k] = Code(ErrorCode::BUFFER_OVERFLOW);
        } else if (src > (*obj)->size() || len > (*obj)->size() - src) {
          out[i][j][k] = Code(ErrorCode::INVALID_READ);
        } else {
          if (len > 0) {
            std::memcpy(reinterpret_cast<void*>(buffer_ptrs[i] + dst), (*obj)->data() + src, len);
          }
          out[i][j][k] = static_cast<int64_t>(len);
        }
      }
    }
  }
  return out;
}

// ---- query and removal --------------------------------------------------------------------

int DistributedStore::IsExist(const std::string& key) { return BatchIsExist({key})[0]; }

std::vector<int> DistributedStore::BatchIsExist(const std::vector<std::string>& keys) {
  TIERKV_REQUIRE_CLIENT("batch_is_exist",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  return client_->BatchIsExist(keys);
}

std::vector<int> DistributedStore::BatchIsExistViews(std::span<const std::string_view> keys) {
  TIERKV_REQUIRE_CLIENT("batch_is_exist",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  return client_->BatchIsExistViews(keys);
}

int64_t DistributedStore::GetSize(const std::string& key) {
  TIERKV_REQUIRE_CLIENT("get_size", Code(ErrorCode::INVALID_PARAMS));
  auto descs = client_->BatchGetReplicaDesc({key});
  if (!descs[0].ok()) return Code(descs[0].code());
  if (descs[0]->empty()) return Code(ErrorCode::OBJECT_NOT_FOUND);
  return static_cast<int64_t>((*descs[0])[0].size);
}

int DistributedStore::Remove(const std::string& key, bool force) {
  TIERKV_REQUIRE_CLIENT("remove", Code(ErrorCode::INVALID_PARAMS));
  return client_->Remove(key, force);
}

std::vector<int> DistributedStore::BatchRemove(const std::vector<std::string>& keys, bool force) {
  TIERKV_REQUIRE_CLIENT("batch_remove",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  return client_->BatchRemove(keys, force);
}

int64_t DistributedStore::RemoveByRegex(const std::string& regex, bool force) {
  TIERKV_REQUIRE_CLIENT("remove_by_regex", Code(ErrorCode::INVALID_PARAMS));
  return client_->RemoveByRegex(regex, force);
}

int64_t DistributedStore::RemoveAll(bool force) {
  TIERKV_REQUIRE_CLIENT("remove_all", Code(ErrorCode::INVALID_PARAMS));
  return client_->RemoveAll(force);
}

std::vector<Result<std::vector<StoreReplica>>> DistributedStore::BatchGetReplicaDesc(
    const std::vector<std::string>& keys) {
  using Out = std::vector<Result<std::vector<StoreReplica>>>;
  TIERKV_REQUIRE_CLIENT("batch_get_replica_desc",
                        Out(keys.size(), Status(ErrorCode::INVALID_PARAMS, "store not set up")));
  const std::string own = client_->LocalSegmentName();
  Out out;
  for (auto& r : client_->BatchGetReplicaDesc(keys)) {
    if (!r.ok()) {
      out.emplace_back(r.status());
      continue;
    }
    std::vector<StoreReplica> replicas;
    for (const ReplicaDesc& d : *r) {
      replicas.push_back(StoreReplica{d.tier, !own.empty() && d.segment_name == own, d.segment_name,
                                      d.offset, d.size});
    }
    out.emplace_back(std::move(replicas));
  }
  return out;
}

// ---- tensors ------------------------------------------------------------------------------

namespace {

Status CheckTensor(const TensorView& t) {
  if (TensorElementSize(t.info.dtype) == 0) {
    return Status(ErrorCode::INVALID_PARAMS,
                  "unsupported tensor dtype code " + std::to_string(t.info.dtype));
  }
  if (t.info.shape.size() > kMaxTensorDims) {
    return Status(ErrorCode::INVALID_PARAMS, "tensors of more than 8 dimensions are not stored");
  }
  const uint64_t payload = TensorPayloadBytes(t.info);
  if (payload != t.nbytes || (payload > 0 && t.data == nullptr)) {
    return Status(ErrorCode::INVALID_PARAMS, "tensor data of " + std::to_string(t.nbytes) +
                                                 " bytes for a shape of " +
                                                 std::to_string(payload) + " bytes");
  }
  return Status::Ok();
}

// Stages tensor objects (header + payload pieces) and puts them in one batch.
std::vector<int> PutTensorObjects(Client& client, LocalBuffer& local,
                                  const std::vector<std::string>& keys,
                                  const std::vector<TensorInfo>& infos,
                                  const std::vector<std::vector<std::span<const uint8_t>>>& pieces,
                                  const ReplicateConfig& config, bool upsert) {
  std::vector<int> codes(keys.size(), kOk);
  Staged staged;
  for (size_t i = 0; i < keys.size(); ++i) {
    const uint64_t payload = TensorPayloadBytes(infos[i]);
    auto span = local.Allocate(kTensorHeaderBytes + payload);
    if (!span.ok()) {
      spdlog::warn("tensor put of {}: {}", keys[i], span.status().message());
      codes[i] = Code(span.code());
      continue;
    }
    if (Status st = EncodeTensorHeader(infos[i], span->ptr); !st.ok()) {
      codes[i] = Code(st.code());
      continue;
    }
    uint8_t* at = span->ptr + kTensorHeaderBytes;
    for (const auto& p : pieces[i]) {
      if (!p.empty()) std::memcpy(at, p.data(), p.size());
      at += p.size();
    }
    staged.index.push_back(i);
    staged.keys.push_back(keys[i]);
    staged.ptrs.push_back({span->ptr});
    staged.sizes.push_back({static_cast<size_t>(kTensorHeaderBytes + payload)});
    staged.spans.push_back(std::move(*span));
  }
  PutStaged(client, staged, config, upsert, codes);
  return codes;
}

Result<StoredTensor> ToStoredTensor(Result<std::shared_ptr<const BufferHandle>> bytes) {
  if (!bytes.ok()) return bytes.status();
  auto info = DecodeTensorHeader((*bytes)->data(), (*bytes)->size());
  if (!info.ok()) return info.status();
  StoredTensor t;
  t.info = std::move(*info);
  t.payload_offset = kTensorHeaderBytes;
  t.payload_bytes = (*bytes)->size() - kTensorHeaderBytes;
  t.bytes = std::move(*bytes);
  return t;
}

}  // namespace

std::vector<int> DistributedStore::BatchPutTensor(const std::vector<std::string>& keys,
                                                  const std::vector<TensorView>& tensors,
                                                  const StoreReplicateConfig& config) {
  return BatchPutTensorImpl(keys, tensors, config, /*upsert=*/false);
}

std::vector<int> DistributedStore::BatchUpsertTensor(const std::vector<std::string>& keys,
                                                     const std::vector<TensorView>& tensors,
                                                     const StoreReplicateConfig& config) {
  return BatchPutTensorImpl(keys, tensors, config, /*upsert=*/true);
}

std::vector<int> DistributedStore::BatchPutTensorImpl(const std::vector<std::string>& keys,
                                                      const std::vector<TensorView>& tensors,
                                                      const StoreReplicateConfig& config,
                                                      bool upsert) {
  TIERKV_REQUIRE_CLIENT("put_tensor",
                        std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS)));
  if (keys.size() != tensors.size()) {
    SetError("batch_put_tensor: " + std::to_string(keys.size()) + " keys but " +
             std::to_string(tensors.size()) + " tensors");
    return std::vector<int>(keys.size(), Code(ErrorCode::INVALID_PARAMS));
  }
  auto core = ToCore(config, keys.size(), *client_, hostname_);
  if (!core.ok()) {
    SetError("put_tensor: " + core.status().message());
    return std::vector<int>(keys.size(), Code(core.code()));
  }
  std::vector<int> codes(keys.size(), kOk);
  std::vector<size_t> keep;
  std::vector<std::string> ok_keys;
  std::vector<TensorInfo> infos;
  std::vector<std::vector<std::span<const uint8_t>>> pieces;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (Status st = CheckTensor(tensors[i]); !st.ok()) {
      spdlog::warn("put_tensor {}: {}", keys[i], st.message());
      codes[i] = Code(st.code());
      continue;
    }
    keep.push_back(i);
    ok_keys.push_back(keys[i]);
    infos.push_back(tensors[i].info);
    pieces.push_back({std::span(static_cast<const uint8_t*>(tensors[i].data), tensors[i].nbytes)});
  }
  const auto done =
      PutTensorObjects(*client_, *local_, ok_keys, infos, pieces, Subset(*core, keep), upsert);
  for (size_t j = 0; j < keep.size(); ++j) codes[keep[j]] = done[j];
  return codes;
}

int DistributedStore::PutTensor(const std::string& key, const TensorView& tensor,
                                const StoreReplicateConfig& config) {
  return BatchPutTensor({key}, {tensor}, config)[0];
}

int DistributedStore::UpsertTensor(const std::string& key, const TensorView& tensor,
                                   const StoreReplicateConfig& config) {
  return BatchUpsertTensor({key}, {tensor}, config)[0];
}

Result<StoredTensor> DistributedStore::GetTensor(const std::string& key) {
  return std::move(BatchGetTensor({key})[0]);
}

std::vector<Result<StoredTensor>> DistributedStore::BatchGetTensor(
    const std::vector<std::string>& keys) {
  std::vector<Result<StoredTensor>> out;
  for (auto& bytes : BatchGetBuffer(keys)) out.push_back(ToStoredTensor(std::move(bytes)));
  return out;
}

Result<TensorInfo> DistributedStore::GetTensorInto(const std::string& key, uintptr_t ptr,
                                                   uint64_t capacity) {
  return std::move(BatchGetTensorInto({key}, {ptr}, {capacity})[0]);
}

std::vector<Result<TensorInfo>> DistributedStore::BatchGetTensorInto(
    const std::vector<std::string>& keys, const std::vector<uintptr_t>& ptrs,
    const std::vector<uint64_t>& capacities) {
  const std::vector<int64_t> got = BatchGetInto(keys, ptrs, capacities);
  std::vector<Result<TensorInfo>> out;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (got[i] < 0) {
      out.emplace_back(static_cast<ErrorCode>(got[i]), "reading tensor " + keys[i]);
      continue;
    }
    out.push_back(
        DecodeTensorHeader(reinterpret_cast<const void*>(ptrs[i]), static_cast<size_t>(got[i])));
  }
  return out;
}

int64_t DistributedStore::GetTensorIntoTensor(const std::string& key, const TensorInfo& dst_info,
                                              uintptr_t dst, uint64_t dst_bytes) {
  auto t = GetTensor(key);
  if (!t.ok()) return Code(t.code());
  if (t->info.dtype != dst_info.dtype || t->info.shape != dst_info.shape ||
      t->payload_bytes != dst_bytes) {
    SetError("get_tensor_into " + key +
             ": the destination's dtype or shape differs from the "
             "stored tensor's (nothing written)");
    return Code(ErrorCode::INVALID_PARAMS);
  }
  if (dst_bytes > 0) {
    std::memcpy(reinterpret_cast<void*>(dst), t->bytes->data() + t->payload_offset, dst_bytes);
  }
  return static_cast<int64_t>(dst_bytes);
}

int DistributedStore::PutTensorFrom(const std::string& key, uintptr_t ptr, uint64_t size,
                                    const StoreReplicateConfig& config) {
  if (!RegisteredRange(ptr, size)) {
    SetError("put_tensor_from " + key + ": [ptr, ptr+size) is not in a registered buffer");
    return Code(ErrorCode::BUFFER_NOT_REGISTERED);
  }
  if (auto info = DecodeTensorHeader(reinterpret_cast<const void*>(ptr), size); !info.ok()) {
    SetError("put_tensor_from " + key + ": " + info.status().message());
    return Code(info.code());
  }
  return PutFrom(key, ptr, size, config);
}

std::string DistributedStore::TpKey(const std::string& key, int tp_rank, int tp_size) {
  return tp_size > 1 ? key + "_tp_" + std::to_string(tp_rank) : key;
}

int DistributedStore::PutTensorWithTp(const std::string& key, const TensorView& tensor, int tp_size,
                                      int split_dim, const StoreReplicateConfig& config) {
  if (tp_size <= 1) return PutTensor(key, tensor, config);
  TIERKV_REQUIRE_CLIENT("put_tensor_with_tp", Code(ErrorCode::INVALID_PARAMS));
  auto fail = [&](const std::string& why) {
    SetError("put_tensor_with_tp " + key + ": " + why);
    return Code(ErrorCode::INVALID_PARAMS);
  };
  if (Status st = CheckTensor(tensor); !st.ok()) return fail(st.message());
  const int ndim = static_cast<int>(tensor.info.shape.size());
  const int dim = split_dim < 0 ? split_dim + ndim : split_dim;
  if (dim < 0 || dim >= ndim)
    return fail("split_dim " + std::to_string(split_dim) + " out of range");
  const int64_t extent = tensor.info.shape[dim];
  if (extent % tp_size != 0) {
    return fail("dimension " + std::to_string(dim) + " of size " + std::to_string(extent) +
                " does not split into " + std::to_string(tp_size) + " equal shards");
  }
  auto core = ToCore(config, static_cast<size_t>(tp_size), *client_, hostname_);
  if (!core.ok()) return fail(core.status().message());
  // Shard r along `dim` of a C-order tensor: for each of the `outer` leading index tuples, one
  // contiguous run of chunk x inner elements.
  uint64_t outer = 1, inner = TensorElementSize(tensor.info.dtype);
  for (int d = 0; d < dim; ++d) outer *= static_cast<uint64_t>(tensor.info.shape[d]);
  for (int d = dim + 1; d < ndim; ++d) inner *= static_cast<uint64_t>(tensor.info.shape[d]);
  const uint64_t chunk = static_cast<uint64_t>(extent / tp_size);
  const auto* base = static_cast<const uint8_t*>(tensor.data);
  std::vector<std::string> keys;
  std::vector<TensorInfo> infos;
  std::vector<std::vector<std::span<const uint8_t>>> pieces;
  for (int r = 0; r < tp_size; ++r) {
    keys.push_back(TpKey(key, r, tp_size));
    TensorInfo info = tensor.info;
    info.shape[dim] = static_cast<int64_t>(chunk);
    infos.push_back(std::move(info));
    auto& p = pieces.emplace_back();
    for (uint64_t o = 0; o < outer; ++o) {
      const uint64_t offset = (o * static_cast<uint64_t>(extent) + r * chunk) * inner;
      p.emplace_back(base + offset, chunk * inner);
    }
  }
  return FirstFailure(PutTensorObjects(*client_, *local_, keys, infos, pieces, *core, false));
}

#undef TIERKV_REQUIRE_CLIENT

}  // namespace tierkv
