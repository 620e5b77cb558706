// Configuration of a tierkv client/store, read from JSON.
//
// Keys are compatible with Mooncake's client config; docs/configuration.md lists
// every key with its default. Parsing is strict: a bad value, an unknown key or an
// inconsistent combination is rejected with a message that names the key.
// Thread-safety: plain value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/status.h"

namespace tierkv {

enum class Mode { kEmbedded, kStandaloneStore };

struct Config {
  Mode mode = Mode::kEmbedded;
  // "" = run the master in-process (embedded mode only).
  std::string master_server_address;
  // Send the data path's batch calls over the master's metadata channel when it offers one
  // (docs/wire-format.md); false = every call over gRPC.
  bool master_meta_channel = true;
  std::string metadata_server = "P2PHANDSHAKE";
  std::string local_hostname;  // "" = this host's name
  // Segment a put tries first when its ReplicateConfig names none ("" = the freest); a
  // segment's name, with or without its "@socket" endpoint part.
  std::string preferred_segment;
  uint64_t global_segment_size = 1ull << 30;  // bytes this process contributes
  uint64_t local_buffer_size = 256ull << 20;  // requester staging buffer
  std::string protocol = "tcp";               // tcp | rdma | shm | auto
  std::string device_name;                    // NIC list for rdma
  bool enable_offload = false;                // SSD tier behind this process's segment
  // The cluster credential (docs/security.md): a file of mode 0600 or stricter holding the token
  // this process presents to the master and to stores; "" = none (only an embedded store, or a
  // cluster that trusts whoever reaches its ports). A second file whose token is accepted from
  // peers too, during a rotation ("" = none).
  std::string cluster_token_file;
  std::string cluster_accept_token_file;
  // TLS to the master's control plane: the CA that signed the master's certificate ("" =
  // plaintext), and this process's certificate and key for a master that requires client
  // certificates (mutual TLS; "" = none). PEM files.
  std::string tls_ca_file;
  std::string tls_cert_file;
  std::string tls_key_file;
  // TLS on tierkv's TCP data plane (off by default; docs/security.md). A process that serves a
  // segment over tcp (tierkv store, a contributing client): its certificate and key (PEM; both
  // or neither). A requester: the CA of the stores' certificates; set, it speaks TLS to every
  // data port and refuses one that does not.
  std::string data_tls_cert_file;
  std::string data_tls_key_file;
  std::string data_tls_ca_file;
  // etcd's own credentials, for a master_server_address "etcd://...": a user and a file (mode
  // 0600 or stricter) holding its password ("" = no authentication), and the CA of etcd's
  // certificate ("" = plaintext).
  // The tenant the segment this process contributes is dedicated to ("" = shared; a tenant's
  // name: 1..64 of [A-Za-z0-9_.-]; tierkv store --tenant). docs/security.md, "Tenants".
  std::string segment_tenant;
  std::string etcd_user;
  std::string etcd_password_file;
  std::string etcd_ca_file;

  // Master / metadata.
  uint64_t default_kv_lease_ttl_ms = 10000;  // read lease granted by exists/get
  // How long a soft pin holds when the put names no soft_pin_ttl_ms; 0 = until removed.
  uint64_t default_kv_soft_pin_ttl_ms = 0;
  double eviction_high_watermark_ratio = 0.90;
  double eviction_ratio = 0.05;                   // fraction of a segment freed per eviction pass
  std::string eviction_policy = "lru";            // lru | reuse (docs/configuration.md)
  uint64_t put_start_discard_timeout_ms = 30000;  // abandoned puts reclaimed after
  uint32_t metadata_shards = 64;

  // Data path.
  bool verify_checksum = true;             // verify xxh3-64 on every get
  bool require_registered_buffers = true;  // batch_*_multi_buffers buffers
  uint32_t transfer_threads = 0;           // 0 = min(4, hardware threads)
  bool use_huge_pages = true;              // try 2 MiB pages for segments

  // SSD tier (enable_offload). One tier file per path; several paths are striped.
  std::vector<std::string> offload_paths;
  uint64_t offload_capacity = uint64_t{16} << 30;        // bytes per path
  uint64_t offload_region_size = uint64_t{64} << 20;     // unit of disk eviction
  std::string offload_eviction_policy = "fifo";          // fifo | lru (over regions)
  std::string offload_write_policy = "demote_on_evict";  // | write_behind
  std::string offload_io_engine = "auto";                // auto | io_uring | posix
  bool offload_warm_restart = false;       // keep tier files and re-register them at start
  bool offload_page_cache_reads = false;   // read the tier through the page cache
  bool offload_allow_buffered_io = false;  // accept a filesystem without O_DIRECT
  bool offload_block_devices = false;      // offload_paths are raw block devices, used whole
  uint64_t staging_buffer_size = uint64_t{1280} << 20;  // disk reads land here
  double staging_usable_ratio = 0.9;  // share of the staging buffer one batch part may use
  uint64_t staging_ttl_ms = 30000;    // staging space of a vanished requester is reclaimed
  bool promote_on_hit = false;        // copy disk hits back to DRAM
  uint32_t promote_min_hits = 2;      // disk hits before an object is promoted
};

// Parses a JSON document. Unknown keys are errors (INVALID_CONFIG).
Result<Config> ParseConfig(std::string_view json_text);
// Reads and parses a file; the error names the path.
Result<Config> LoadConfigFile(const std::string& path);
// Environment overrides applied by ParseConfig/LoadConfig: TIERKV_STAGING_USABLE_RATIO,
// TIERKV_LOCAL_HOSTNAME, TIERKV_PREFERRED_SEGMENT.
// Path from TIERKV_CONFIG_PATH if set, else defaults. `explicit_path`, when not
// empty (e.g. --config), wins over the environment.
Result<Config> LoadConfig(const std::string& explicit_path = "");
// Checks cross-key rules; ParseConfig already calls it.
Status ValidateConfig(const Config& config);

// "80GB", "4gb", "512MiB", "1024" -> bytes (1024-based; B, K/KB/KiB, M, G, T).
Result<uint64_t> ParseSize(std::string_view text);
// true/false, case-insensitive; anything else fails.
Result<bool> ParseBool(std::string_view text);
std::string_view ModeName(Mode mode);

}  // namespace tierkv
