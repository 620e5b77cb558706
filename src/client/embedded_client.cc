#include "client/embedded_client.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <unordered_set>

#include "client/in_process_backend.h"
#include "client/local_tier.h"
#include "common/checksum.h"
#include "common/key.h"
#include "transport/device_select.h"
#include "transport/ucx_options.h"

namespace tierkv {
namespace {

MasterOptions MasterOptionsFrom(const Config& c) {
  MasterOptions o;
  o.lease_ttl = Millis(c.default_kv_lease_ttl_ms);
  o.high_watermark = c.eviction_high_watermark_ratio;
  o.eviction_ratio = c.eviction_ratio;
  o.put_timeout = Millis(c.put_start_discard_timeout_ms);
  o.shards = c.metadata_shards;
  return o;
}

std::string SegmentName(const Config& c) {
  static std::atomic<int> counter{0};
  std::string host = c.local_hostname;
  if (host.empty()) {
    char buf[256] = {};
    host = gethostname(buf, sizeof(buf) - 1) == 0 ? buf : "localhost";
  }
  return host + ":" + std::to_string(getpid()) + ":" + std::to_string(counter++);
}

template <typename Piece>
uint64_t TotalSize(const std::vector<Piece>& pieces, bool& overflow) {
  uint64_t total = 0;
  overflow = false;
  for (const auto& p : pieces) {
    if (total + p.size < total) overflow = true;
    total += p.size;
  }
  return total;
}

// Pairs ptrs[i][k] with sizes[i][k]. A key whose lists are missing or differ in
// length gets INVALID_PARAMS in `shape` (and no pieces).
template <typename Piece, typename Ptr>
std::vector<std::vector<Piece>> ToPieces(size_t n, const std::vector<std::vector<Ptr>>& ptrs,
                                         const std::vector<std::vector<size_t>>& sizes,
                                         std::vector<int>& shape) {
  std::vector<std::vector<Piece>> pieces(n);
  shape.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (i >= ptrs.size() || i >= sizes.size() || ptrs[i].size() != sizes[i].size()) {
      shape[i] = ToInt(ErrorCode::INVALID_PARAMS);
      continue;
    }
    for (size_t k = 0; k < ptrs[i].size(); ++k) pieces[i].push_back(Piece{ptrs[i][k], sizes[i][k]});
  }
  return pieces;
}

// Warm restart: registers what the tier still holds as disk replicas through `add` (the
// master's AddDiskReplicas), in batches of 4096 (one RPC each with a remote master, well under
// its batch limit), and logs how many the master took.
void ReRegister(std::vector<ScannedRecord>& surviving,
                const std::function<std::vector<Status>(const std::vector<DiskRecord>&)>& add) {
  if (surviving.empty()) return;
  constexpr size_t kBatch = 4096;
  size_t ok = 0;
  for (size_t from = 0; from < surviving.size(); from += kBatch) {
    std::vector<DiskRecord> part;
    for (size_t i = from; i < std::min(surviving.size(), from + kBatch); ++i) {
      part.push_back(
          DiskRecord{std::move(surviving[i].key), surviving[i].location, surviving[i].checksum});
    }
    for (const Status& st : add(part)) ok += st.ok() ? 1 : 0;
  }
  spdlog::info("warm restart: re-registered {} of {} objects found in the SSD tier", ok,
               surviving.size());
}

bool TierLogEnabled() {
  const char* v = std::getenv("TIERKV_TIER_LOG");
  return v != nullptr && std::string_view(v) == "1";
}

}  // namespace

Result<std::unique_ptr<EmbeddedClient>> EmbeddedClient::Create(
    const Config& config, std::shared_ptr<InProcessMaster> master,
    const std::function<void(SsdTierOptions&)>& tier_hook) {
  if (Status st = ValidateConfig(config); !st.ok()) return st;
  if (config.mode != Mode::kEmbedded) {
    return Status(ErrorCode::UNAVAILABLE_IN_CURRENT_MODE, "EmbeddedClient needs mode 'embedded'");
  }
  if (!master) {
    // Maintenance every 1/4 of the shorter timeout, at least every second.
    const auto period = Millis(std::clamp<uint64_t>(
        std::min(config.put_start_discard_timeout_ms, config.default_kv_lease_ttl_ms) / 4, 10,
        1000));
    master = std::make_shared<InProcessMaster>(MasterOptionsFrom(config), period);
  }
  std::unique_ptr<EmbeddedClient> client(new EmbeddedClient(config, master));
  auto segment = MemorySegment::Create(
      SegmentName(config), config.global_segment_size,
      config.use_huge_pages ? PagePolicy::kHugeIfAvailable : PagePolicy::kSmallPages);
  if (!segment.ok()) return segment.status();
  client->segment_ = std::move(segment).value();
  auto id = master->Attach(client->segment_);
  if (!id.ok()) return id.status();
  client->segment_id_ = *id;
  if (config.enable_offload) {
    SsdTierOptions tier_options = TierOptionsFrom(config);
    if (tier_hook) tier_hook(tier_options);
    if (Status st = client->OpenTier(tier_options); !st.ok()) return st;
  }
  spdlog::info("embedded client: segment {} of {} bytes ({} pages), {} transfer threads",
               client->segment_->name(), client->segment_->size(), client->segment_->page_kind(),
               client->pool_.threads());
  return client;
}

Result<std::unique_ptr<EmbeddedClient>> EmbeddedClient::CreateRemote(
    const Config& config, const std::string& data_host,
    const std::function<void(SsdTierOptions&)>& tier_hook) {
  if (Status st = ValidateConfig(config); !st.ok()) return st;
  if (config.master_server_address.empty()) {
    return Status(ErrorCode::INVALID_CONFIG, "master_server_address is empty: no remote master");
  }
  // The network transport's settings, checked now so a bad protocol/NIC fails here.
  transport::UcxTransportOptions ucx;
  ucx.protocol = config.protocol == "rdma" ? "rdma" : "tcp";
  if (!config.device_name.empty()) {
    auto device = transport::SelectDeviceFromEnv(config.device_name);
    if (!device.ok()) return device.status();
    ucx.device = *device;
  }
  if (config.protocol != "shm") {
    if (auto selected = transport::SelectUcxTransports(ucx); !selected.ok()) {
      return Status(selected.code(),
                    "protocol '" + config.protocol + "': " + selected.status().message());
    }
  }
  if (config.enable_offload && config.mode != Mode::kEmbedded) {
    return Status(ErrorCode::INVALID_CONFIG,
                  "enable_offload needs a segment to put the SSD tier behind: mode 'embedded' (a "
                  "store, or a rank contributing a segment), not a requester that contributes "
                  "none");
  }
  auto remote = RemoteBackend::Connect(config.master_server_address, Millis(5000),
                                       config.local_hostname, config.protocol, ucx);
  if (!remote.ok()) return remote.status();
  std::unique_ptr<EmbeddedClient> client(new EmbeddedClient(config, nullptr, *remote));
  if (config.mode == Mode::kEmbedded) {
    auto segment = MemorySegment::Create(
        SegmentName(config), config.global_segment_size,
        config.use_huge_pages ? PagePolicy::kHugeIfAvailable : PagePolicy::kSmallPages);
    if (!segment.ok()) return segment.status();
    client->segment_ = std::move(segment).value();
    std::vector<ScannedRecord> surviving;
    if (config.enable_offload) {
      SsdTierOptions tier_options = TierOptionsFrom(config);
      if (tier_hook) tier_hook(tier_options);
      if (Status st = client->OpenRemoteTier(tier_options, &surviving); !st.ok()) return st;
    }
    // The socket name is unique per process and segment; the directory is per user.
    static std::atomic<int> sockets{0};
    auto server = transport::ShmSegmentServer::Start(
        "seg-" + std::to_string(getpid()) + "-" + std::to_string(sockets++) + ".sock",
        client->segment_);
    if (!server.ok()) return server.status();
    client->shm_server_ = std::move(server).value();
    std::string tcp_address;
    // An SSD tier is read by other processes through the UCX server (staged loads): without a
    // data host it listens on loopback, for this host's requesters.
    const std::string serve_on =
        !data_host.empty() ? data_host : (client->tier_ ? "127.0.0.1" : std::string());
    if (!serve_on.empty()) {
      // Served over the network too, for requesters on other hosts (or protocol tcp).
      auto ucx_server =
          transport::UcxSegmentServer::Start(client->segment_, serve_on, 0, ucx, client->tier_);
      if (!ucx_server.ok()) return ucx_server.status();
      client->ucx_server_ = std::move(ucx_server).value();
      tcp_address = client->ucx_server_->address();
    }
    client->mounted_name_ =
        SegmentEndpointName(client->segment_->name(), client->shm_server_->path(), tcp_address);
    auto id = client->remote_->MountOwn(client->segment_, client->mounted_name_);
    if (!id.ok()) return id.status();
    client->segment_id_ = *id;
    if (client->tier_) {
      if (Status st = client->AttachRemoteTier(surviving); !st.ok()) return st;
    }
    spdlog::info("client: segment {} of {} bytes ({} pages) on master {}", client->mounted_name_,
                 client->segment_->size(), client->segment_->page_kind(),
                 config.master_server_address);
  } else {
    spdlog::info("requester on master {} (contributes no segment), {} transfer threads",
                 config.master_server_address, client->pool_.threads());
  }
  return client;
}

EmbeddedClient::EmbeddedClient(Config config, std::shared_ptr<InProcessMaster> master,
                               std::shared_ptr<RemoteBackend> remote)
    : config_(std::move(config)),
      master_(std::move(master)),
      backend_(remote ? std::shared_ptr<ClientBackend>(remote)
                      : std::make_shared<InProcessBackend>(master_)),
      remote_(std::move(remote)),
      pool_(DefaultTransferThreads(config_.transfer_threads)),
      loader_(config_.staging_usable_ratio, &pool_),
      tier_log_(TierLogEnabled()) {}

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
  o.device.engine = c.offload_io_engine == "io_uring" ? DeviceEngine::kUring
                    : c.offload_io_engine == "posix"  ? DeviceEngine::kPosix
                                                      : DeviceEngine::kAuto;
  o.staging.capacity = c.staging_buffer_size;
  o.staging.ttl = Millis(c.staging_ttl_ms);
  o.staging.want_huge_pages = c.use_huge_pages;
  o.want_huge_pages = c.use_huge_pages;
  return o;
}

Status EmbeddedClient::OpenTier(const SsdTierOptions& options) {
  // The log reports a reused region's keys: their disk replicas are gone.
  std::weak_ptr<InProcessMaster> weak = master_;
  const SegmentId segment = segment_id_;
  auto on_evicted = [weak, segment](uint32_t region, uint64_t generation,
                                    std::vector<std::string> keys) {
    if (auto master = weak.lock()) {
      master->master().DropDiskReplicas(segment, region, generation, keys);
    }
  };
  std::vector<ScannedRecord> surviving;
  auto tier = SsdTier::Open(options, on_evicted, options.warm_restart ? &surviving : nullptr);
  if (!tier.ok()) return tier.status();
  tier_ = std::shared_ptr<SsdTier>(std::move(tier).value());
  master_->AttachTier(segment_id_, tier_);
  ReRegister(surviving, [&](const std::vector<DiskRecord>& part) {
    return master_->master().AddDiskReplicas(segment_id_, part);
  });
  if (config_.offload_write_policy == "write_behind") {
    write_behind_ = std::make_unique<WriteBehind>(&master_->master());
  }
  spdlog::info("SSD tier: {} bytes over {} file(s), staging buffer {} bytes, policy {}",
               tier_->capacity(), options.paths.size(), tier_->staging_capacity(),
               config_.offload_write_policy);
  return Status::Ok();
}

Status EmbeddedClient::OpenRemoteTier(const SsdTierOptions& options,
                                      std::vector<ScannedRecord>* surviving) {
  // A reused region's keys: the master drops their disk replicas (an RPC, under the log's
  // mutex, before the region is written again). Until the segment is mounted there is nothing
  // to tell: no record of this incarnation exists yet, and warm restart's are registered after.
  auto handle = tier_segment_;
  std::weak_ptr<RemoteBackend> weak = remote_;
  auto on_evicted = [weak, handle](uint32_t region, uint64_t generation,
                                   std::vector<std::string> keys) {
    const SegmentId segment = handle->load();
    if (auto remote = weak.lock(); remote && segment != 0) {
      remote->master().DropDiskReplicas(segment, region, generation, keys);
    }
  };
  auto tier = SsdTier::Open(options, on_evicted, options.warm_restart ? surviving : nullptr);
  if (!tier.ok()) return tier.status();
  tier_ = std::shared_ptr<SsdTier>(std::move(tier).value());
  return Status::Ok();
}

Status EmbeddedClient::AttachRemoteTier(std::vector<ScannedRecord>& surviving) {
  tier_segment_->store(segment_id_);
  remote_->SetOwnTier(segment_id_, tier_);
  ReRegister(surviving, [&](const std::vector<DiskRecord>& part) {
    return remote_->master().AddDiskReplicas(segment_id_, part);
  });
  // The master demotes to this tier through a stream this process keeps open.
  // With write_behind the master copies every put on this segment here soon after its PutEnd
  // (the puts come from other processes: only the master sees them all).
  tier_link_ = std::make_unique<TierMoveLink>(remote_->master(), segment_id_,
                                              std::make_shared<LocalTierMover>(segment_, tier_),
                                              config_.offload_write_policy == "write_behind");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!tier_link_->connected() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (!tier_link_->connected()) {
    return Status(ErrorCode::RPC_FAIL, "the master at " + config_.master_server_address +
                                           " did not open the tier-move stream within 5 s "
                                           "(a master without TierMoves?)");
  }
  spdlog::info(
      "SSD tier: {} bytes, staging buffer {} bytes, policy {}, served to requesters "
      "at {}",
      tier_->capacity(), tier_->staging_capacity(), config_.offload_write_policy,
      ucx_server_ ? ucx_server_->address() : std::string("(nowhere)"));
  return Status::Ok();
}

EmbeddedClient::~EmbeddedClient() {
  tier_link_.reset();     // no more demotions into this process
  write_behind_.reset();  // drains: queued copies finish while the tier is attached
  if (tier_) LogTierCounters();
  if (remote_) {
    if (segment_id_ != 0) {
      if (Status st = remote_->UnmountOwn(segment_id_); !st.ok()) {
        spdlog::warn("unmounting segment {}: {}", mounted_name_, st.ToString());
      }
    }
    if (shm_server_) shm_server_->Stop();
    if (ucx_server_) ucx_server_->Stop();
    return;
  }
  if (segment_id_ != 0) {
    if (Status st = master_->Detach(segment_id_); !st.ok()) {
      spdlog::warn("unmounting segment {}: {}", segment_id_, st.ToString());
    }
  }
}

void EmbeddedClient::LogTierCounters() const {
  // A store's master is another process (its counters are on its metrics): tier figures only.
  const MasterStats m = master_ ? master_->master().Stats() : MasterStats{};
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

Status EmbeddedClient::RegisterBuffer(void* ptr, size_t size) {
  return buffers_.Register(ptr, size);
}
Status EmbeddedClient::UnregisterBuffer(void* ptr) { return buffers_.Unregister(ptr); }

template <typename Piece>
std::vector<int> EmbeddedClient::CheckBatch(const std::vector<std::string>& keys,
                                            const std::vector<std::vector<Piece>>& pieces,
                                            bool check_registered) const {
  std::vector<int> codes(keys.size(), 0);
  std::unordered_set<std::string_view> seen;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (Status st = ValidateKey(keys[i]); !st.ok()) {
      codes[i] = ToInt(st.code());
      continue;
    }
    if (!seen.insert(keys[i]).second) {
      codes[i] = ToInt(ErrorCode::DUPLICATE_KEY);
      continue;
    }
    bool overflow = false;
    if (pieces[i].empty() || TotalSize(pieces[i], overflow) == 0 || overflow) {
      codes[i] = ToInt(ErrorCode::INVALID_PARAMS);
      continue;
    }
    for (const auto& p : pieces[i]) {
      if (p.size > 0 && p.ptr == nullptr) {
        codes[i] = ToInt(ErrorCode::INVALID_PARAMS);
        break;
      }
      if (check_registered && p.size > 0 && !buffers_.Contains(p.ptr, p.size)) {
        codes[i] = ToInt(ErrorCode::BUFFER_NOT_REGISTERED);
        break;
      }
    }
  }
  return codes;
}

std::vector<TransferCount> EmbeddedClient::served_transfers() const {
  if (!ucx_server_) return {};
  return {TransferCount{ucx_server_->protocol(), ucx_server_->read_bytes(),
                        ucx_server_->written_bytes()}};
}

void EmbeddedClient::WriteRemoteReplicas(const std::vector<std::vector<RemoteWrite>>& remote,
                                         std::vector<int>& codes) {
  std::vector<RemoteWrite> ops;
  std::vector<size_t> owner;
  for (size_t j = 0; j < remote.size(); ++j) {
    if (codes[j] != 0) continue;
    for (const RemoteWrite& w : remote[j]) {
      ops.push_back(w);
      owner.push_back(j);
    }
  }
  if (ops.empty()) return;
  const std::vector<Status> done = backend_->WriteRemote(ops);
  for (size_t k = 0; k < ops.size(); ++k) {
    if (done[k].ok()) {
      uint64_t bytes = 0;
      for (const ConstPiece& p : ops[k].src) bytes += p.size;
      backend_->transfers().AddWritten(ops[k].segment->transport(), bytes);
    }
    if (!done[k].ok() && codes[owner[k]] == 0) {
      spdlog::debug("put: replica on segment {} failed: {}", ops[k].segment->name(),
                    done[k].ToString());
      codes[owner[k]] = ToInt(ErrorCode::TRANSFER_FAIL);
    }
  }
}

std::vector<int> EmbeddedClient::PutImpl(const std::vector<std::string>& keys,
                                         const std::vector<std::vector<ConstPiece>>& pieces,
                                         const ReplicateConfig& config, bool check_registered) {
  const size_t n = keys.size();
  if (!config.group_ids.empty() && config.group_ids.size() != n) {
    spdlog::warn("put: group_ids has {} entries for {} keys", config.group_ids.size(), n);
    return std::vector<int>(n, ToInt(ErrorCode::INVALID_PARAMS));
  }
  std::vector<int> codes = CheckBatch(keys, pieces, check_registered);
  // The keys that passed the client-side checks go to the master.
  std::vector<size_t> idx;
  std::vector<std::string> sub_keys;
  std::vector<uint64_t> sub_sizes;
  ReplicateConfig sub_config = config;
  sub_config.group_ids.clear();
  if (sub_config.preferred_segment.empty())
    sub_config.preferred_segment = config_.preferred_segment;
  for (size_t i = 0; i < n; ++i) {
    if (codes[i] != 0) continue;
    bool overflow = false;
    idx.push_back(i);
    sub_keys.push_back(keys[i]);
    sub_sizes.push_back(TotalSize(pieces[i], overflow));
    if (!config.group_ids.empty()) sub_config.group_ids.push_back(config.group_ids[i]);
  }
  if (sub_keys.empty()) return codes;
  auto started = backend_->PutStart(sub_keys, sub_sizes, sub_config);

  std::vector<uint64_t> checksums(sub_keys.size(), 0);
  std::vector<int> copy_codes(sub_keys.size(), 0);
  // Replicas on segments not mapped here go through the backend's transport afterwards.
  std::vector<std::vector<RemoteWrite>> remote(sub_keys.size());
  pool_.ParallelFor(sub_keys.size(), [&](size_t j) {
    if (!started[j].ok()) return;
    const auto& replicas = started[j]->replicas;
    bool hashed = false;
    for (size_t r = 0; r < replicas.size(); ++r) {
      // FindSegment returns no segment of a dead owner; a mapped one is asked again after the
      // copy.
      auto seg = backend_->FindSegment(replicas[r].segment);
      if (!seg || replicas[r].offset + replicas[r].size > seg->size()) {
        copy_codes[j] = ToInt(ErrorCode::TRANSFER_FAIL);
        return;
      }
      if (!seg->mapped()) {
        remote[j].push_back(RemoteWrite{std::move(seg), replicas[r].offset, pieces[idx[j]]});
        continue;
      }
      // The checksum is taken from the user's bytes while writing the first mapped replica.
      const uint64_t sum = GatherCopy(seg->base() + replicas[r].offset, pieces[idx[j]], !hashed);
      if (!seg->alive()) {  // the owner died before or during the copy: the put is lost
        copy_codes[j] = ToInt(ErrorCode::TRANSFER_FAIL);
        return;
      }
      backend_->transfers().AddWritten(seg->transport(), replicas[r].size);
      if (!hashed) checksums[j] = sum;
      hashed = true;
    }
    if (!hashed) checksums[j] = HashPieces(pieces[idx[j]]);
  });
  WriteRemoteReplicas(remote, copy_codes);

  std::vector<std::string> end_keys, revoke_keys;
  std::vector<uint64_t> end_ids, end_sums, revoke_ids;
  std::vector<size_t> end_pos;
  for (size_t j = 0; j < sub_keys.size(); ++j) {
    const size_t i = idx[j];
    if (!started[j].ok()) {
      codes[i] = ToInt(started[j].code());
      if (started[j].code() != ErrorCode::OBJECT_ALREADY_EXISTS) {
        spdlog::debug("put {}: {}", keys[i], started[j].status().ToString());
      }
    } else if (copy_codes[j] != 0) {
      codes[i] = copy_codes[j];
      revoke_keys.push_back(sub_keys[j]);
      revoke_ids.push_back(started[j]->put_id);
    } else {
      end_keys.push_back(sub_keys[j]);
      end_ids.push_back(started[j]->put_id);
      end_sums.push_back(checksums[j]);
      end_pos.push_back(i);
    }
  }
  if (!revoke_keys.empty()) backend_->PutRevoke(revoke_keys, revoke_ids);
  if (!end_keys.empty()) {
    auto ended = backend_->PutEnd(end_keys, end_ids, end_sums);
    for (size_t k = 0; k < ended.size(); ++k) codes[end_pos[k]] = ToInt(ended[k].code());
    if (write_behind_) {
      std::vector<std::string> done;
      for (size_t k = 0; k < ended.size(); ++k) {
        if (ended[k].ok()) done.push_back(end_keys[k]);
      }
      write_behind_->Enqueue(done);
    }
  }
  return codes;
}

std::vector<int64_t> EmbeddedClient::GetImpl(const std::vector<std::string>& keys,
                                             const std::vector<std::vector<MutPiece>>& pieces,
                                             bool check_registered, bool exact) {
  const size_t n = keys.size();
  const std::vector<int> checked = CheckBatch(keys, pieces, check_registered);
  std::vector<int64_t> results(checked.begin(), checked.end());
  std::vector<size_t> idx;
  std::vector<std::string> sub_keys;
  for (size_t i = 0; i < n; ++i) {
    if (results[i] != 0) continue;
    idx.push_back(i);
    sub_keys.push_back(keys[i]);
  }
  if (sub_keys.empty()) return results;
  auto replicas = backend_->GetReplicas(sub_keys);
  const Clock* clock = backend_->clock();
  const bool verify = config_.verify_checksum;
  std::vector<std::vector<MutPiece>> dsts(sub_keys.size());
  std::vector<uint8_t> wants_disk(sub_keys.size(), 0);  // memory failed, a disk replica exists
  std::vector<size_t> remote_from(sub_keys.size(), 0);  // 1 + replica to read over the network

  pool_.ParallelFor(sub_keys.size(), [&](size_t j) {
    const size_t i = idx[j];
    if (!replicas[j].ok()) {
      results[i] = ToInt(replicas[j].code());
      return;
    }
    const ObjectReplicas& obj = *replicas[j];
    bool overflow = false;
    const uint64_t capacity = TotalSize(pieces[i], overflow);
    if (capacity < obj.size) {
      results[i] = ToInt(ErrorCode::BUFFER_OVERFLOW);
      return;
    }
    if (exact && capacity != obj.size) {
      results[i] = ToInt(ErrorCode::INVALID_PARAMS);
      return;
    }
    // Fill exactly obj.size bytes: trim the destination pieces to the object.
    std::vector<MutPiece>& dst = dsts[j];
    uint64_t left = obj.size;
    for (const auto& p : pieces[i]) {
      if (left == 0) break;
      dst.push_back(MutPiece{p.ptr, std::min<uint64_t>(p.size, left)});
      left -= dst.back().size;
    }
    int64_t code = ToInt(ErrorCode::TRANSFER_FAIL);
    bool has_disk = false;
    Transport moved_by = Transport::kLocal;
    for (size_t k = 0; k < obj.replicas.size(); ++k) {
      const ReplicaLocation& rep = obj.replicas[k];
      if (rep.tier == ReplicaTier::kDisk) {
        has_disk = true;
        continue;
      }
      // Keeps the memory mapped while copying; never a dead owner's (asked again after the copy).
      auto seg = backend_->FindSegment(rep.segment);
      if (!seg || rep.offset + obj.size > seg->size()) continue;
      if (!seg->mapped()) {
        remote_from[j] = k + 1;  // read over the network after this pass, from replica k on
        return;
      }
      const uint64_t sum = ScatterCopy(seg->base() + rep.offset, dst, verify);
      // Asked after the copy: an owner alive now was alive through it (death is final), so the
      // bytes were served, not read from a dead store's leftover memory.
      if (!seg->alive()) continue;
      if (verify && sum != obj.checksum) {
        spdlog::error("checksum mismatch reading {} from segment {} at offset {}", keys[i],
                      seg->name(), rep.offset);
        code = ToInt(ErrorCode::CHECKSUM_MISMATCH);
        continue;  // another replica may be intact
      }
      code = static_cast<int64_t>(obj.size);
      moved_by = seg->transport();
      break;
    }
    if (code >= 0 && clock->Now() > obj.lease_deadline) {
      // The lease ran out mid-copy: the space may have been reused; discard.
      code = ToInt(ErrorCode::LEASE_EXPIRED);
    }
    if (code >= 0) backend_->transfers().AddRead(moved_by, obj.size);
    if (code < 0 && has_disk) {
      wants_disk[j] = 1;  // the staged load fills (or zeroes) the destination
      return;
    }
    if (code < 0) {
      for (const auto& p : dst) std::memset(p.ptr, 0, p.size);  // never leave wrong bytes
    }
    results[i] = code;
  });

  ReadRemoteReplicas(replicas, dsts, remote_from, idx, results, wants_disk);

  size_t memory_hits = 0;
  uint64_t memory_bytes = 0;
  std::vector<DiskRead> reads;
  std::vector<size_t> slot;  // reads[r] is sub-key slot[r]
  for (size_t j = 0; j < sub_keys.size(); ++j) {
    if (wants_disk[j]) {
      DiskRead r;
      r.key = &keys[idx[j]];
      r.checksum = replicas[j]->checksum;
      r.dst = std::move(dsts[j]);
      reads.push_back(std::move(r));
      slot.push_back(j);
    } else if (results[idx[j]] > 0) {
      ++memory_hits;
      memory_bytes += static_cast<uint64_t>(results[idx[j]]);
    }
  }
  if (!reads.empty() || tier_log_) {
    // Disk replicas in order; a failed read falls back to the object's next disk replica.
    std::vector<size_t> next_replica(reads.size(), 0);
    std::vector<size_t> pending(reads.size());
    for (size_t r = 0; r < reads.size(); ++r) pending[r] = r;
    std::vector<int64_t> final_code(reads.size(), ToInt(ErrorCode::OBJECT_NOT_FOUND));
    while (!pending.empty()) {
      std::vector<DiskRead> round;
      std::vector<SegmentId> round_segments;  // of round[k]'s disk replica
      std::vector<size_t> owner;
      for (size_t r : pending) {
        const auto& reps = replicas[slot[r]]->replicas;
        size_t& next = next_replica[r];
        while (next < reps.size() && reps[next].tier != ReplicaTier::kDisk) ++next;
        if (next == reps.size()) continue;
        DiskRead d;
        d.tier = backend_->FindTier(reps[next].segment);
        d.key = reads[r].key;
        d.location = reps[next].disk;
        d.checksum = reads[r].checksum;
        d.dst = reads[r].dst;
        round_segments.push_back(reps[next].segment);
        ++next;
        round.push_back(std::move(d));
        owner.push_back(r);
      }
      if (round.empty()) break;
      LoadDisk(round, round_segments);
      pending.clear();
      for (size_t k = 0; k < round.size(); ++k) {
        final_code[owner[k]] = round[k].result;
        if (round[k].result < 0) pending.push_back(owner[k]);
      }
    }
    size_t disk_hits = 0, failed = 0;
    uint64_t disk_bytes = 0;
    std::vector<size_t> hits;
    for (size_t r = 0; r < reads.size(); ++r) {
      results[idx[slot[r]]] = final_code[r];
      if (final_code[r] >= 0) {
        ++disk_hits;
        disk_bytes += static_cast<uint64_t>(final_code[r]);
        hits.push_back(r);
      } else {
        ++failed;
        for (const auto& p : reads[r].dst) std::memset(p.ptr, 0, p.size);
      }
    }
    if (config_.promote_on_hit && !hits.empty()) Promote(reads, hits);
    if (tier_log_) {
      spdlog::info(
          "tier: get batch of {} keys: {} from memory ({} bytes), {} from disk ({} "
          "bytes), {} disk reads failed",
          n, memory_hits, memory_bytes, disk_hits, disk_bytes, failed);
    }
  }
  return results;
}

void EmbeddedClient::ReadRemoteReplicas(const std::vector<Result<ObjectReplicas>>& replicas,
                                        const std::vector<std::vector<MutPiece>>& dsts,
                                        std::vector<size_t>& remote_from,
                                        const std::vector<size_t>& idx,
                                        std::vector<int64_t>& results,
                                        std::vector<uint8_t>& wants_disk) {
  const Clock* clock = backend_->clock();
  const bool verify = config_.verify_checksum;
  // Rounds: each pending key reads its next memory replica (network or mapped); a failed or
  // corrupt read moves on to the next one.
  for (;;) {
    std::vector<RemoteRead> ops;
    std::vector<size_t> owner;
    for (size_t j = 0; j < remote_from.size(); ++j) {
      if (remote_from[j] == 0) continue;
      const ObjectReplicas& obj = *replicas[j];
      size_t k = remote_from[j] - 1;
      remote_from[j] = 0;
      for (; k < obj.replicas.size(); ++k) {
        const ReplicaLocation& rep = obj.replicas[k];
        if (rep.tier != ReplicaTier::kMemory) continue;
        auto seg = backend_->FindSegment(rep.segment);
        if (!seg || rep.offset + obj.size > seg->size()) continue;
        if (seg->mapped()) {
          const uint64_t sum = ScatterCopy(seg->base() + rep.offset, dsts[j], verify);
          if (!seg->alive()) continue;  // after the copy, as in the first pass
          if (verify && sum != obj.checksum) continue;
          if (clock->Now() > obj.lease_deadline) break;  // LEASE_EXPIRED below
          results[idx[j]] = static_cast<int64_t>(obj.size);
          backend_->transfers().AddRead(seg->transport(), obj.size);
          k = obj.replicas.size() + 1;  // done
          break;
        }
        ops.push_back(RemoteRead{std::move(seg), rep.offset, dsts[j]});
        owner.push_back(j);
        remote_from[j] = k + 2;  // if this read fails, go on after it
        break;
      }
      if (k == obj.replicas.size() + 1 || remote_from[j] != 0) continue;
      // No replica left in memory: the disk, or a failure with zeroed bytes.
      const bool has_disk = std::any_of(obj.replicas.begin(), obj.replicas.end(),
                                        [](const auto& r) { return r.tier == ReplicaTier::kDisk; });
      if (has_disk) {
        wants_disk[j] = 1;
        continue;
      }
      const bool expired = k < obj.replicas.size();
      results[idx[j]] = ToInt(expired ? ErrorCode::LEASE_EXPIRED : ErrorCode::TRANSFER_FAIL);
      for (const auto& p : dsts[j]) std::memset(p.ptr, 0, p.size);
    }
    if (ops.empty()) return;
    const std::vector<Status> done = backend_->ReadRemote(ops);
    // The checksums of what arrived, on the transfer pool's threads (a pass over the bytes).
    std::vector<uint8_t> intact(ops.size(), 0);
    pool_.ParallelFor(ops.size(), [&](size_t k) {
      intact[k] =
          done[k].ok() && (!verify || HashPieces(dsts[owner[k]]) == replicas[owner[k]]->checksum);
    });
    for (size_t k = 0; k < ops.size(); ++k) {
      const size_t j = owner[k];
      const ObjectReplicas& obj = *replicas[j];
      bool ok = intact[k] != 0;
      if (done[k].ok() && !ok) {
        spdlog::error("checksum mismatch reading {} bytes from segment {} at offset {}", obj.size,
                      ops[k].segment->name(), ops[k].offset);
      }
      if (ok && clock->Now() > obj.lease_deadline) {
        results[idx[j]] = ToInt(ErrorCode::LEASE_EXPIRED);  // the space may have been reused
        for (const auto& p : dsts[j]) std::memset(p.ptr, 0, p.size);
        remote_from[j] = 0;
        continue;
      }
      if (ok) {
        results[idx[j]] = static_cast<int64_t>(obj.size);
        backend_->transfers().AddRead(ops[k].segment->transport(), obj.size);
        remote_from[j] = 0;
      }
      // else remote_from[j] names the next replica to try in the next round
    }
  }
}

void EmbeddedClient::LoadDisk(std::vector<DiskRead>& round,
                              const std::vector<SegmentId>& segments) {
  // Tiers in this process: the staged loader. Others: through their owners' servers.
  std::vector<DiskRead> local;
  std::vector<size_t> local_at, remote_at;
  std::vector<RemoteStage> ops;
  for (size_t k = 0; k < round.size(); ++k) {
    if (round[k].tier) {
      local.push_back(round[k]);
      local_at.push_back(k);
    } else {
      remote_at.push_back(k);
      ops.push_back(RemoteStage{segments[k], *round[k].key, round[k].location, round[k].dst});
    }
  }
  if (!local.empty()) {
    loader_.Load(local);
    for (size_t j = 0; j < local.size(); ++j) round[local_at[j]].result = local[j].result;
  }
  if (ops.empty()) return;
  const std::vector<Status> done = backend_->StageRemote(ops, config_.staging_usable_ratio);
  // Disk bytes are always verified, whatever verify_checksum says (as the staged loader does).
  pool_.ParallelFor(ops.size(), [&](size_t j) {
    DiskRead& r = round[remote_at[j]];
    if (!done[j].ok()) {
      spdlog::warn("staged load of {} from segment {} failed: {}", *r.key, ops[j].segment,
                   done[j].ToString());
      r.result = ToInt(done[j].code());
    } else if (HashPieces(r.dst) != r.checksum) {
      spdlog::error(
          "checksum mismatch loading {} from the SSD tier of segment {} (region {} "
          "offset {})",
          *r.key, ops[j].segment, r.location.region, r.location.offset);
      r.result = ToInt(ErrorCode::CHECKSUM_MISMATCH);
    } else {
      r.result = static_cast<int64_t>(r.location.size);
      return;
    }
    for (const auto& p : r.dst) std::memset(p.ptr, 0, p.size);  // never leave wrong bytes
  });
  for (size_t j = 0; j < ops.size(); ++j) {
    const DiskRead& r = round[remote_at[j]];
    if (r.result >= 0)
      backend_->transfers().AddRead(backend_->StageTransport(ops[j].segment), r.location.size);
  }
}

void EmbeddedClient::Promote(const std::vector<DiskRead>& reads, const std::vector<size_t>& hits) {
  std::vector<std::string> keys;
  for (size_t r : hits) keys.push_back(*reads[r].key);
  auto started = backend_->PromoteStart(keys, config_.promote_min_hits);
  std::vector<std::string> end_keys;
  std::vector<uint64_t> ids;
  std::vector<bool> ok;
  for (size_t k = 0; k < started.size(); ++k) {
    if (!started[k].ok()) continue;  // not admitted yet, or no free DRAM
    const ReplicaLocation& loc = started[k]->replicas.front();
    auto seg = backend_->FindSegment(loc.segment);
    const bool fits = seg && seg->alive() && loc.offset + loc.size <= seg->size();
    bool written = fits;
    if (fits) {
      // The caller's buffer holds the verified bytes: copy them into the new range.
      std::vector<ConstPiece> src;
      for (const auto& p : reads[hits[k]].dst) src.push_back(ConstPiece{p.ptr, p.size});
      if (seg->mapped()) {
        GatherCopy(seg->base() + loc.offset, src, /*hash=*/false);
      } else {
        written = backend_->WriteRemote({RemoteWrite{seg, loc.offset, std::move(src)}})[0].ok();
      }
    }
    end_keys.push_back(keys[k]);
    ids.push_back(started[k]->put_id);
    ok.push_back(written);
  }
  if (!end_keys.empty()) backend_->PromoteEnd(end_keys, ids, ok);
}

int EmbeddedClient::Put(const std::string& key, const void* data, size_t size,
                        const ReplicateConfig& config) {
  return PutImpl({key}, {{ConstPiece{data, size}}}, config, /*check_registered=*/false)[0];
}

int64_t EmbeddedClient::Get(const std::string& key, void* buf, size_t capacity) {
  return GetImpl({key}, {{MutPiece{buf, capacity}}}, /*check_registered=*/false,
                 /*exact=*/false)[0];
}

std::vector<int> EmbeddedClient::BatchPutFromMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
    const std::vector<std::vector<size_t>>& sizes, const ReplicateConfig& config) {
  const size_t n = keys.size();
  std::vector<int> shape;
  const auto pieces = ToPieces<ConstPiece>(n, ptrs, sizes, shape);
  auto codes = PutImpl(keys, pieces, config, config_.require_registered_buffers);
  for (size_t i = 0; i < n; ++i) {
    if (shape[i] != 0) codes[i] = shape[i];
  }
  return codes;
}

std::vector<int64_t> EmbeddedClient::BatchGetIntoMultiBuffers(
    const std::vector<std::string>& keys, const std::vector<std::vector<void*>>& ptrs,
    const std::vector<std::vector<size_t>>& sizes) {
  const size_t n = keys.size();
  std::vector<int> shape;
  const auto pieces = ToPieces<MutPiece>(n, ptrs, sizes, shape);
  auto results = GetImpl(keys, pieces, config_.require_registered_buffers, /*exact=*/true);
  for (size_t i = 0; i < n; ++i) {
    if (shape[i] != 0) results[i] = shape[i];
  }
  return results;
}

std::vector<int> EmbeddedClient::BatchIsExist(const std::vector<std::string>& keys) {
  return backend_->Exists(keys);
}

std::vector<Result<std::vector<ReplicaDesc>>> EmbeddedClient::BatchGetReplicaDesc(
    const std::vector<std::string>& keys) {
  auto replicas = backend_->GetReplicas(keys);
  std::vector<Result<std::vector<ReplicaDesc>>> out;
  out.reserve(keys.size());
  for (auto& r : replicas) {
    if (!r.ok()) {
      out.emplace_back(r.status());
      continue;
    }
    std::vector<ReplicaDesc> descs;
    for (const auto& loc : r->replicas) {
      std::string name = backend_->SegmentName(loc.segment);
      uint64_t offset = loc.offset;
      if (loc.tier == ReplicaTier::kDisk) {
        // Byte offset of the record in the owner's tier: region index x region size + offset.
        auto tier = backend_->FindTier(loc.segment);
        offset = (tier ? tier->log().region_size() : 0) * loc.disk.region + loc.disk.offset;
      }
      descs.push_back(
          ReplicaDesc{loc.tier, name.empty() ? std::string("<unmounted>") : name, offset, r->size});
    }
    out.emplace_back(std::move(descs));
  }
  return out;
}

int EmbeddedClient::Remove(const std::string& key, bool force) {
  return ToInt(backend_->Remove(key, force).code());
}

int64_t EmbeddedClient::RemoveAll(bool force) {
  return static_cast<int64_t>(backend_->RemoveAll(force));
}

}  // namespace tierkv
