#include "local_cluster.h"

#include <sys/wait.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "rpc/master_process.h"
#include "tierkv/client.h"

namespace tierkv::bench {
Config RequesterConfig(Config base, const std::string& master_address,
                       const std::string& protocol) {
  base.mode = Mode::kStandaloneStore;
  base.global_segment_size = 0;
  base.master_server_address = master_address;
  base.protocol = protocol;
  return base;
}

Result<Requesters> ConnectRequesters(const Config& base, const std::string& master_address,
                                     const AlignedBuffer& src, const AlignedBuffer& dst) {
  Requesters r;
  for (const char* protocol : {"shm", "tcp"}) {
    Result<std::unique_ptr<Client>> created =
        Client::Create(RequesterConfig(base, master_address, protocol));
    if (!created.ok()) {
      if (std::string(protocol) == "shm") return created.status();
      r.tcp_status = created.status().ToString();  // measured once Create accepts it
      continue;
    }
    std::unique_ptr<Client> client = std::move(created).value();
    if (Status s = client->RegisterBuffer(src.data(), src.size()); !s.ok()) return s;
    if (Status s = client->RegisterBuffer(dst.data(), dst.size()); !s.ok()) return s;
    if (Status s = WarmUpRequester(*client); !s.ok()) return s;
    (std::string(protocol) == "shm" ? r.shm : r.tcp) = std::move(client);
  }
  return r;
}

Status WarmUpRequester(Client& client) {
  const std::string key = "bench-remote@warm-up";
  std::vector<uint8_t> value(4096, 0x5A);
  std::vector<uint8_t> back(value.size());
  if (int rc = client.Put(key, value.data(), value.size()); rc != 0) {
    return Failed("warm-up put: " + CodeString(rc));
  }
  const int64_t got = client.Get(key, back.data(), back.size());
  if (got != static_cast<int64_t>(value.size()) || back != value) {
    return Failed("warm-up get: " + (got < 0 ? CodeString(got) : "wrong bytes"));
  }
  if (int rc = client.Remove(key, /*force=*/true); rc != 0) {
    return Failed("warm-up remove: " + CodeString(rc));
  }
  return Status::Ok();
}

Result<RemoteRun> RemoteRun::Start(const Config& base, uint64_t segment_bytes, bool small_pages,
                                   const AlignedBuffer& src, const AlignedBuffer& dst,
                                   const std::string& token_file,
                                   const std::vector<std::string>& store_args) {
  RemoteRun run;
  std::vector<std::string> auth;
  if (!token_file.empty()) auth = {"--token-file", token_file};
  std::vector<std::string> store = auth;
  store.insert(store.end(), store_args.begin(), store_args.end());
  Result<std::unique_ptr<LocalCluster>> cluster =
      LocalCluster::Start(segment_bytes, small_pages, store, auth);
  if (!cluster.ok()) return cluster.status();
  run.cluster = std::move(cluster).value();
  Config requester = base;
  if (!token_file.empty()) requester.cluster_token_file = token_file;
  Result<Requesters> clients =
      ConnectRequesters(requester, run.cluster->master_address(), src, dst);
  if (!clients.ok()) return clients.status();
  run.clients = std::move(clients).value();
  return run;
}

Status RemoteRun::Stop(const AlignedBuffer& src, const AlignedBuffer& dst) {
  for (std::unique_ptr<Client>* client : {&clients.shm, &clients.tcp}) {
    if (*client == nullptr) continue;
    (void)(*client)->UnregisterBuffer(src.data());
    (void)(*client)->UnregisterBuffer(dst.data());
    client->reset();
  }
  return cluster->Stop();
}

Result<std::unique_ptr<LocalCluster>> LocalCluster::Start(
    uint64_t segment_bytes, bool small_pages, const std::vector<std::string>& store_args,
    const std::vector<std::string>& master_args) {
  const std::string self = SelfExecutable();
  if (self.empty()) return Failed("cannot read /proc/self/exe");
  std::unique_ptr<LocalCluster> cluster(new LocalCluster());
  cluster->segment_bytes_ = segment_bytes;
  MasterProcessOptions master;
  master.binary = self;
  master.args = {"--host", "127.0.0.1", "--port", "0", "--metrics-port", "-1"};
  master.args.insert(master.args.end(), master_args.begin(), master_args.end());
  if (std::getenv("TIERKV_LOG_LEVEL") == nullptr) master.env = {{"TIERKV_LOG_LEVEL", "warn"}};
  Result<std::unique_ptr<MasterProcess>> started = MasterProcess::Start(master);
  if (!started.ok()) return started.status();
  cluster->master_ = std::move(started).value();

  MasterProcessOptions store = master;
  store.command = "store";
  // The segment is served over shm and over the network transport on 127.0.0.1; no metrics
  // server (its fixed default port would collide between concurrent runs).
  store.args = {"--master",       cluster->master_->address(),
                "--segment-size", std::to_string(segment_bytes),
                "--data-host",    "127.0.0.1",
                "--metrics-port", "-1"};
  if (small_pages) store.args.push_back("--small-pages");
  store.args.insert(store.args.end(), store_args.begin(), store_args.end());
  // Pre-faulting a large segment takes a while on 4 KiB pages.
  store.start_timeout = Millis(60000);
  started = MasterProcess::Start(store);
  if (!started.ok()) return started.status();
  cluster->store_ = std::move(started).value();
  return cluster;
}

LocalCluster::~LocalCluster() = default;  // MasterProcess kills and reaps what still runs

std::string LocalCluster::master_address() const { return master_->address(); }

Status LocalCluster::Stop() {
  std::string failed;
  for (auto [process, name] :
       {std::pair{store_.get(), "store"}, std::pair{master_.get(), "master"}}) {
    if (process == nullptr || !process->running()) continue;
    const std::optional<int> status = process->Stop();
    if (!status || !WIFEXITED(*status) || WEXITSTATUS(*status) != 0) {
      failed += std::string(failed.empty() ? "" : ", ") + "tierkv " + name;
    }
  }
  if (!failed.empty()) return Failed(failed + " did not exit cleanly on SIGTERM");
  return Status::Ok();
}

}  // namespace tierkv::bench
