#include "store/store.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <random>

#include "common/host_name.h"
#include "store/local_tier_mover.h"
#include "store/tier_stager.h"
#include "transport/network_segment.h"
#include "transport/segment_endpoint.h"
#include "transport/shm_segment_server.h"
#include "transport/ucx_options.h"
#include "transport/ucx_worker.h"

namespace tierkv {
namespace {

// "<host>:<pid>:<n>": unique per process and segment.
std::string NewSegmentName(const Config& config) {
  static std::atomic<int> counter{0};
  return HostName(config.local_hostname) + ":" + std::to_string(getpid()) + ":" +
         std::to_string(counter++);
}

// Whether a listener could bind `host`:`port` now (a probe: the socket is closed at once).
bool CanBind(const std::string& host, int port) {
  auto at = transport::ResolveHost(host, port, /*passive=*/true, ErrorCode::TRANSFER_FAIL);
  if (!at.ok()) return false;
  const int fd = ::socket(at->storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool bound = ::bind(fd, at->get(), at->length) == 0;
  ::close(fd);
  return bound;
}

// The data port a Mooncake-named segment takes (StoreOptions::name_by_data_port): `wanted` when
// it can be bound, else a free one in Mooncake's range; 0 when none could be found.
int ChooseDataPort(const std::string& host, int wanted) {
  if (wanted != 0) {
    if (CanBind(host, wanted)) return wanted;
    spdlog::warn("store: port {} of local_hostname is taken on {}; choosing another", wanted, host);
  }
  constexpr int kFirst = 12300, kLast = 14300;  // Mooncake's P2P handshake range
  std::mt19937 random(std::random_device{}());
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int port = kFirst + static_cast<int>(random() % (kLast - kFirst + 1));
    if (CanBind(host, port)) return port;
  }
  return 0;
}

// Warm restart: registers what the tier still holds as disk replicas on the master, in batches
// of 4096 (one RPC each with a remote master, well under its batch limit), and logs how many it
// took.
void ReRegister(std::vector<ScannedRecord>& surviving, MasterApi& master, SegmentId segment) {
  if (surviving.empty()) return;
  constexpr size_t kBatch = 4096;
  size_t ok = 0;
  for (size_t from = 0; from < surviving.size(); from += kBatch) {
    std::vector<DiskRecord> part;
    for (size_t i = from; i < std::min(surviving.size(), from + kBatch); ++i) {
      part.push_back(
          DiskRecord{std::move(surviving[i].key), surviving[i].location, surviving[i].checksum});
    }
    for (const Status& st : master.AddDiskReplicas(segment, part)) ok += st.ok() ? 1 : 0;
  }
  spdlog::info("warm restart: re-registered {} of {} objects found in the SSD tier", ok,
               surviving.size());
}

}  // namespace

SsdTierOptions TierOptionsFrom(const Config& c) {
  SsdTierOptions o;
  o.paths = c.offload_paths;
  o.capacity_per_path = c.offload_capacity;
  o.region_size = c.offload_region_size;
  o.eviction =
      c.offload_eviction_policy == "lru" ? RegionEvictionPolicy::kLru : RegionEvictionPolicy::kFifo;
  o.warm_restart = c.offload_warm_restart;
  o.page_cache_reads = c.offload_page_cache_reads;
  o.allow_buffered_fallback = c.offload_allow_buffered_io;
  o.block_devices = c.offload_block_devices;
  o.device.engine = c.offload_io_engine == "io_uring" ? DeviceEngine::kUring
                    : c.offload_io_engine == "posix"  ? DeviceEngine::kPosix
                                                      : DeviceEngine::kAuto;
  o.staging.capacity = c.staging_buffer_size;
  o.staging.ttl = Millis(c.staging_ttl_ms);
  o.staging.want_huge_pages = c.use_huge_pages;
  o.want_huge_pages = c.use_huge_pages;
  return o;
}

Store::Store(std::shared_ptr<SegmentHost> host, std::shared_ptr<MemorySegment> segment)
    : host_(std::move(host)), segment_(std::move(segment)) {}

Result<std::unique_ptr<Store>> Store::Create(const Config& config,
                                             std::shared_ptr<SegmentHost> host,
                                             StoreOptions options) {
  if (!host) return Status(ErrorCode::INVALID_PARAMS, "Store::Create: no segment host");
  std::string name = NewSegmentName(config);
  if (options.name_by_data_port && !options.data_host.empty()) {
    if (const int port = ChooseDataPort(options.data_host, options.data_port); port != 0) {
      name = HostName(config.local_hostname) + ":" + std::to_string(port);
      options.data_port = port;
    }
  }
  auto segment = MemorySegment::Create(
      name, config.global_segment_size,
      config.use_huge_pages ? PagePolicy::kHugeIfAvailable : PagePolicy::kSmallPages);
  if (!segment.ok()) return segment.status();
  std::unique_ptr<Store> store(new Store(std::move(host), std::move(segment).value()));
  // The tier opens before the servers start, so they serve it; what warm restart found is
  // registered once the segment is mounted.
  std::vector<ScannedRecord> surviving;
  if (config.enable_offload) {
    if (Status st = store->OpenTier(config, options, &surviving); !st.ok()) return st;
  }
  store->mounted_name_ = store->segment_->name();
  if (store->host_->serves_other_processes()) {
    if (Status st = store->Serve(config, options); !st.ok()) return st;
  }
  OwnTier own_tier;
  if (store->tier_) {
    own_tier.tier = store->tier_;
    own_tier.mover = store->mover_;
    own_tier.write_behind = config.offload_write_policy == "write_behind";
  }
  auto id = store->host_->MountOwn(store->segment_, store->mounted_name_, own_tier);
  if (!id.ok()) return id.status();
  store->segment_id_ = *id;
  store->mounted_id_->store(*id);
  if (store->tier_) {
    if (Status st = store->AttachTier(config, surviving); !st.ok()) return st;
  }
  return store;
}

Status Store::OpenTier(const Config& config, const StoreOptions& options,
                       std::vector<ScannedRecord>* surviving) {
  SsdTierOptions tier_options = TierOptionsFrom(config);
  if (options.tier_hook) options.tier_hook(tier_options);
  // A reused region's keys: the master drops their disk replicas (with a remote master an RPC,
  // under the log's mutex, before the region is written again). Until the segment is mounted
  // there is nothing to tell: no record of this incarnation exists yet, and warm restart's are
  // registered after.
  std::weak_ptr<SegmentHost> weak = host_;
  auto mounted = mounted_id_;
  auto on_evicted = [weak, mounted](uint32_t region, uint64_t generation,
                                    std::vector<std::string> keys) {
    const SegmentId segment = mounted->load();
    if (auto host = weak.lock(); host && segment != 0) {
      host->DropOwnDiskReplicas(segment, region, generation, keys);
    }
  };
  auto tier =
      SsdTier::Open(tier_options, on_evicted, tier_options.warm_restart ? surviving : nullptr);
  if (!tier.ok()) return tier.status();
  tier_ = std::shared_ptr<SsdTier>(std::move(tier).value());
  mover_ = std::make_shared<LocalTierMover>(segment_, tier_);
  reclaim_ = std::make_unique<PeriodicThread>(Millis(1000), [tier = tier_.get(), this] {
    if (const size_t reclaimed = tier->ReclaimExpired(); reclaimed != 0) {
      spdlog::warn("store {}: reclaimed {} staging tickets past their TTL", segment_->name(),
                   reclaimed);
    }
  });
  return Status::Ok();
}

Status Store::Serve(const Config& config, const StoreOptions& options) {
  // The socket name is unique per process and segment; the directory is per user.
  static std::atomic<int> sockets{0};
  auto shm = transport::ShmSegmentServer::Start(
      "seg-" + std::to_string(getpid()) + "-" + std::to_string(sockets++) + ".sock", segment_);
  if (!shm.ok()) return shm.status();
  shm_server_ = std::move(shm).value();
  // An SSD tier is read by other processes through the network server (staged loads): without a
  // data host it listens on loopback, for this host's requesters.
  const std::string serve_on =
      !options.data_host.empty() ? options.data_host : (tier_ ? "127.0.0.1" : std::string());
  std::string data_address;
  if (!serve_on.empty()) {
    auto ucx = transport::UcxOptionsFromConfig(config);
    if (!ucx.ok()) return ucx.status();
    if (tier_) {
      auto stager = TierStager::Start(tier_, segment_->name());
      if (!stager.ok()) return stager.status();
      stager_ = std::move(stager).value();
    }
    auto server =
        transport::StartNetworkSegmentServer(segment_, serve_on, options.data_port, *ucx, stager_);
    if (!server.ok() && options.data_port != 0) {
      spdlog::warn("store {}: cannot listen on {} port {} ({}); serving on a free port instead",
                   segment_->name(), serve_on, options.data_port, server.status().message());
      server = transport::StartNetworkSegmentServer(segment_, serve_on, 0, *ucx, stager_);
    }
    if (!server.ok()) return server.status();
    ucx_server_ = std::move(server).value();
    data_address = ucx_server_->address();
  }
  mounted_name_ = SegmentEndpointName(segment_->name(), shm_server_->path(), data_address);
  return Status::Ok();
}

Status Store::AttachTier(const Config& config, std::vector<ScannedRecord>& surviving) {
  ReRegister(surviving, host_->master(), segment_id_);
  spdlog::info("SSD tier: {} bytes over {} file(s), staging buffer {} bytes, policy {}{}",
               tier_->capacity(), config.offload_paths.size(), tier_->staging_capacity(),
               config.offload_write_policy,
               ucx_server_ ? ", served to requesters at " + ucx_server_->address() : "");
  return Status::Ok();
}

Store::~Store() {
  if (segment_id_ != 0) {
    // Detaches the tier first: no more demotions into this process (an in-process master
    // finishes the write-behind copies queued for it first).
    if (Status st = host_->UnmountOwn(segment_id_); !st.ok()) {
      spdlog::warn("unmounting segment {}: {}", mounted_name_, st.ToString());
    }
  }
  if (tier_) LogTierCounters();
  if (shm_server_) shm_server_->Stop();
  if (ucx_server_) ucx_server_->Stop();
}

void Store::LogTierCounters() const {
  // A remote master is another process (its counters are on its metrics): tier figures only.
  const MasterStats m = host_->serves_other_processes() ? MasterStats{} : host_->master().Stats();
  const SsdTierStats t = tier_->stats();
  spdlog::info(
      "SSD tier counters: demoted {} objects ({} bytes), {} demotion failures, {} written "
      "behind, {} promoted; disk writes {} regions ({} flush errors), {} records appended "
      "({} bytes); {} regions reused ({} disk replicas dropped); staged {} pieces ({} bytes), "
      "{} stage errors; read {} objects directly ({} bytes), {} direct errors; {} read errors, "
      "{} checksum failures; staging {} reclaimed, {} timeouts",
      m.demoted_objects, m.demoted_bytes, m.demotion_failures, m.written_behind, m.promoted_objects,
      t.log.flushes, t.log.flush_errors, t.log.appended_records, t.log.appended_bytes,
      t.log.evicted_regions, m.disk_replicas_dropped, t.staged_pieces, t.staged_bytes,
      t.stage_errors, t.direct_reads, t.direct_bytes, t.direct_errors, t.log.read_errors,
      t.log.checksum_failures, t.staging.reclaimed, t.staging.timeouts);
}

size_t Store::shm_connections() const { return shm_server_ ? shm_server_->open_connections() : 0; }

std::vector<TransferCount> Store::served_transfers() const {
  if (!ucx_server_) return {};
  return {TransferCount{ucx_server_->protocol(), ucx_server_->read_bytes(),
                        ucx_server_->written_bytes()}};
}

uint64_t Store::tier_move_requests() const { return mover_ ? mover_->requests() : 0; }

uint64_t Store::data_unauthenticated() const {
  return ucx_server_ ? ucx_server_->unauthenticated() : 0;
}

std::string Store::data_address() const {
  return ucx_server_ ? ucx_server_->address() : std::string();
}

}  // namespace tierkv
