// libFuzzer targets for the decoders of the master's control plane (proto/tierkv/master.proto).
//
// Every target lives here, compiled once (library tierkv_fuzz_targets); each fuzz_<name>
// executable is fuzz/fuzz_main.cc plus kTierkvFuzzName = "<name>", which it looks up in the
// table at the end (fuzz/fuzz_targets.h).
//  - Request targets (req_<Rpc>): the bytes are parsed as that RPC's request, exactly as the
//    gRPC server does, and a parsed request is dispatched through MasterRpcHandler (the
//    server's validation and dispatch) into a fresh MasterService that holds a registered
//    client, two segments, complete objects and a pending put. The response must serialize and
//    parse again; then the client expires and the reaper unmounts its segments.
//  - Response targets (resp_<Type>): the first byte is the number of keys the client asked
//    for, the rest is parsed as the response the client would get and run through RemoteMaster's
//    decoder (src/rpc/wire.h). A master is not trusted: wrong counts and nonsense fields must
//    give errors, never crashes.
//  - key_batch: wire::DecodeKeys on its own.
//  - ucx_header, ucx_stage_descriptor: the UCX transport's decoders (src/transport/ucx_protocol.h);
//    what decodes must encode back to the same bytes.
// With TIERKV_FUZZ_WRITE_SEEDS=DIR in the environment, the target writes a few valid inputs to
// DIR and exits (scripts/fuzz.sh seeds each corpus this way).
#include <spdlog/spdlog.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "fuzz_targets.h"
#include "master/client_registry.h"
#include "master/master_service.h"
#include "rpc/master_server.h"
#include "rpc/wire.h"
#include "tierkv/master.pb.h"
#include "transport/ucx_protocol.h"

namespace tierkv::fuzz {
namespace {

using namespace tierkv::rpc;      // NOLINT: the message types
using tierkv::rpc::DiskLocation;  // not tierkv::DiskLocation
using tierkv::rpc::ObjectReplicas;
using tierkv::rpc::Replica;
using tierkv::rpc::ReplicateConfig;

// Ids the fixture hands out (ClientRegistry with id base 1, a fresh SegmentRegistry).
constexpr uint64_t kClient = 1;
constexpr uint32_t kSegment1 = 1;

// A small master with a known state, rebuilt for every input so that runs reproduce.
struct Fixture {
  ManualClock clock;
  std::unique_ptr<MasterService> master;
  std::unique_ptr<ClientRegistry> clients;
  std::unique_ptr<MasterRpcHandler> handler;

  Fixture() {
    MasterOptions options;
    options.clock = &clock;
    options.shards = 4;
    master = std::make_unique<MasterService>(options);
    clients = std::make_unique<ClientRegistry>(&clock, Millis(1000), 1);
    handler = std::make_unique<MasterRpcHandler>(*master, *clients, 42);
    (void)clients->Register("fuzz-host");
    for (const char* name : {"seg-1", "seg-2"}) {
      MountSegmentRequest mount;
      mount.set_client_id(kClient);
      mount.set_name(name);
      mount.set_capacity(1 << 20);
      MountSegmentResponse mounted;
      handler->MountSegment(mount, &mounted);
    }
    std::vector<std::string> keys = {"k0", "k1", "k2", "p0"};
    std::vector<Result<PutStartResult>> started =
        master->PutStart(keys, {100, 200, 300, 400}, tierkv::ReplicateConfig{});
    std::vector<std::string> done;
    std::vector<uint64_t> ids;
    for (size_t i = 0; i + 1 < keys.size(); ++i) {  // p0 stays pending
      if (!started[i].ok()) continue;
      done.push_back(keys[i]);
      ids.push_back(started[i]->put_id);
    }
    (void)master->PutEnd(done, ids, std::vector<uint64_t>(done.size(), 7));
  }
};

template <typename Message>
bool Parse(Message* message, const uint8_t* data, size_t size) {
  if (size > static_cast<size_t>(INT32_MAX)) return false;
  return message->ParseFromArray(data, static_cast<int>(size));
}

// Parses a request, dispatches it, and checks that the response serializes.
template <typename Request, typename Response>
void FuzzRequest(const uint8_t* data, size_t size,
                 void (MasterRpcHandler::*method)(const Request&, Response*)) {
  Request request;
  if (!Parse(&request, data, size)) return;
  Fixture f;
  Response response;
  (f.handler.get()->*method)(request, &response);
  std::string bytes;
  if (!response.SerializeToString(&bytes)) std::abort();
  Response again;
  if (!again.ParseFromString(bytes)) std::abort();
  f.clock.Advance(Millis(1000));
  f.handler->ReapSilentClients();
}

// Per-key decoders: the response must give exactly one result per key asked for.
template <typename Response, typename Decode>
void FuzzResponse(const uint8_t* data, size_t size, Decode decode) {
  if (size == 0) return;
  const size_t keys = data[0];
  Response response;
  if (!Parse(&response, data + 1, size - 1)) return;
  if (decode(response, keys) != keys) std::abort();
}

// ---- Seeds -----------------------------------------------------------------------------------

KeyBatch Keys(const std::vector<std::string>& keys) {
  KeyBatch batch;
  wire::EncodeKeys(keys, &batch);
  return batch;
}

// Collects serialized seeds; response seeds start with their key count.
struct SeedList {
  std::vector<std::string> out;
  void add(const google::protobuf::Message& m) { out.push_back(m.SerializeAsString()); }
  void add(const google::protobuf::Message& m, uint8_t keys) {
    out.push_back(std::string(1, static_cast<char>(keys)) + m.SerializeAsString());
  }
};

const std::vector<std::string> kKeys = {"k0", "missing", "", "k1", "p0"};

}  // namespace

const std::vector<Target>& Targets() {
  static const std::vector<Target> targets = {
      {"req_RegisterClient",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::RegisterClient);
       },
       [] {
         SeedList seeds;
         RegisterClientRequest r;
         r.set_host("host");
         seeds.add(r);
         return seeds.out;
       }},
      {"req_Heartbeat",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::Heartbeat);
       },
       [] {
         SeedList seeds;
         HeartbeatRequest r;
         r.set_client_id(kClient);
         seeds.add(r);
         r.set_client_id(99);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_UnregisterClient",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::UnregisterClient);
       },
       [] {
         SeedList seeds;
         UnregisterClientRequest r;
         r.set_client_id(kClient);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_MountSegment",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::MountSegment);
       },
       [] {
         SeedList seeds;
         MountSegmentRequest r;
         r.set_client_id(kClient);
         r.set_name("seg-3");
         r.set_capacity(4096);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_UnmountSegment",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::UnmountSegment);
       },
       [] {
         SeedList seeds;
         UnmountSegmentRequest r;
         r.set_client_id(kClient);
         r.set_segment_id(kSegment1);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_PutStart",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::PutStart);
       },
       [] {
         SeedList seeds;
         PutStartRequest r;
         *r.mutable_keys() = Keys({"n0", "n1", "k0"});
         for (uint64_t s : {1, 5000, 100}) r.add_sizes(s);
         r.mutable_config()->set_replica_num(1);
         seeds.add(r);
         *r.mutable_config()->mutable_group_ids() = Keys({"g", "g", ""});
         r.mutable_config()->set_replica_num(2);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_PutEnd",
       [](const uint8_t* data, size_t size) { FuzzRequest(data, size, &MasterRpcHandler::PutEnd); },
       [] {
         SeedList seeds;
         PutEndRequest r;
         *r.mutable_keys() = Keys({"p0", "k0"});
         r.add_put_ids(4);
         r.add_put_ids(1);
         r.add_checksums(1);
         r.add_checksums(2);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_PutRevoke",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::PutRevoke);
       },
       [] {
         SeedList seeds;
         PutRevokeRequest r;
         *r.mutable_keys() = Keys({"p0", "k0"});
         r.add_put_ids(4);
         r.add_put_ids(1);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_Exists",
       [](const uint8_t* data, size_t size) { FuzzRequest(data, size, &MasterRpcHandler::Exists); },
       [] {
         SeedList seeds;
         ExistsRequest r;
         *r.mutable_keys() = Keys(kKeys);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_GetReplicas",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::GetReplicas);
       },
       [] {
         SeedList seeds;
         GetReplicasRequest r;
         *r.mutable_keys() = Keys(kKeys);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_Remove",
       [](const uint8_t* data, size_t size) { FuzzRequest(data, size, &MasterRpcHandler::Remove); },
       [] {
         SeedList seeds;
         RemoveRequest r;
         *r.mutable_keys() = Keys(kKeys);
         r.set_force(true);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_RemoveAll",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::RemoveAll);
       },
       [] {
         SeedList seeds;
         RemoveAllRequest r;
         r.set_force(true);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_RemoveByRegex",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::RemoveByRegex);
       },
       [] {
         SeedList seeds;
         RemoveByRegexRequest r;
         r.set_regex("^key-[0-9]+$");
         seeds.add(r);
         r.set_regex("(a*)*b|[");
         r.set_force(true);
         seeds.add(r);
         r.set_regex("^k");
         r.set_in_namespace(true);
         r.set_key_namespace("\x1dtenant\x1d");
         seeds.add(r);
         return seeds.out;
       }},
      {"req_ClearReplicas",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::ClearReplicas);
       },
       [] {
         SeedList seeds;
         ClearReplicasRequest r;
         *r.mutable_keys() = Keys(kKeys);
         seeds.add(r);
         r.set_segment_name("seg-0");
         seeds.add(r);
         return seeds.out;
       }},
      {"req_DropDiskReplicas",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::DropDiskReplicas);
       },
       [] {
         SeedList seeds;
         DropDiskReplicasRequest r;
         r.set_client_id(kClient);
         r.set_segment_id(kSegment1);
         r.set_region(0);
         r.set_generation(1);
         *r.mutable_keys() = Keys({"d0", "k0"});
         seeds.add(r);
         return seeds.out;
       }},
      {"req_AddDiskReplicas",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::AddDiskReplicas);
       },
       [] {
         SeedList seeds;
         AddDiskReplicasRequest r;
         r.set_client_id(kClient);
         r.set_segment_id(kSegment1);
         *r.mutable_keys() = Keys({"d0", "k0"});
         for (int i = 0; i < 2; ++i) {
           DiskLocation* l = r.add_locations();
           l->set_region(static_cast<uint32_t>(i));
           l->set_generation(1);
           l->set_offset(4096);
           l->set_size(100);
           r.add_checksums(9);
         }
         seeds.add(r);
         return seeds.out;
       }},
      {"req_CopyToDisk",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::CopyToDisk);
       },
       [] {
         SeedList seeds;
         CopyToDiskRequest r;
         *r.mutable_keys() = Keys(kKeys);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_PromoteStart",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::PromoteStart);
       },
       [] {
         SeedList seeds;
         PromoteStartRequest r;
         *r.mutable_keys() = Keys(kKeys);
         r.set_min_hits(1);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_PromoteEnd",
       [](const uint8_t* data, size_t size) {
         FuzzRequest(data, size, &MasterRpcHandler::PromoteEnd);
       },
       [] {
         SeedList seeds;
         PromoteEndRequest r;
         *r.mutable_keys() = Keys({"k0", "k1"});
         r.add_promotion_ids(1);
         r.add_promotion_ids(2);
         r.add_ok(true);
         r.add_ok(false);
         seeds.add(r);
         return seeds.out;
       }},
      {"req_Stats",
       [](const uint8_t* data, size_t size) { FuzzRequest(data, size, &MasterRpcHandler::Stats); },
       [] {
         SeedList seeds;
         StatsRequest r;
         seeds.add(r);
         return seeds.out;
       }},
      {"resp_Exists",
       [](const uint8_t* data, size_t size) {
         FuzzResponse<ExistsResponse>(data, size, [](const ExistsResponse& r, size_t n) {
           return wire::DecodeExists(r, n).size();
         });
       },
       [] {
         SeedList seeds;
         ExistsResponse r;
         for (int v : {1, 0, -400}) r.add_results(v);
         seeds.add(r, 3);
         r.mutable_status()->set_code(-600);
         seeds.add(r, 3);
         return seeds.out;
       }},
      {"resp_Batch",
       [](const uint8_t* data, size_t size) {
         FuzzResponse<BatchResponse>(data, size, [](const BatchResponse& r, size_t n) {
           return wire::DecodeResults(r.status(), r.results(), n, "Batch").size();
         });
       },
       [] {
         SeedList seeds;
         BatchResponse r;
         for (int v : {0, -704, -400}) r.mutable_results()->add_codes(v);
         KeyMessage* m = r.mutable_results()->add_messages();
         m->set_index(1);
         m->set_message("not found");
         seeds.add(r, 3);
         return seeds.out;
       }},
      {"resp_Placement",
       [](const uint8_t* data, size_t size) {
         FuzzResponse<PlacementResponse>(data, size, [](const PlacementResponse& r, size_t n) {
           return wire::DecodePlacements(r, n, "PutStart").size();
         });
       },
       [] {
         SeedList seeds;
         PlacementResponse r;
         for (int v : {0, -705}) r.mutable_results()->add_codes(v);
         Placement* p = r.add_placements();
         p->set_id(5);
         Replica* replica = p->add_replicas();
         replica->set_segment(1);
         replica->set_offset(64);
         replica->set_size(100);
         r.add_placements();
         seeds.add(r, 2);
         return seeds.out;
       }},
      {"resp_GetReplicas",
       [](const uint8_t* data, size_t size) {
         FuzzResponse<GetReplicasResponse>(data, size, [](const GetReplicasResponse& r, size_t n) {
           return wire::DecodeReplicas(r, n, SteadyTime{}).size();
         });
       },
       [] {
         SeedList seeds;
         GetReplicasResponse r;
         for (int v : {0, -704}) r.mutable_results()->add_codes(v);
         ObjectReplicas* o = r.add_objects();
         o->set_size(100);
         o->set_checksum(7);
         o->set_lease_ms(10000);
         Replica* replica = o->add_replicas();
         replica->set_tier(1);
         replica->mutable_disk()->set_region(3);
         r.add_objects();
         seeds.add(r, 2);
         return seeds.out;
       }},
      {"key_batch",
       [](const uint8_t* data, size_t size) {
         KeyBatch batch;
         if (Parse(&batch, data, size)) {
           std::vector<std::string> keys;
           Status st = wire::DecodeKeys(batch, &keys);
           if (st.ok() && keys.size() != static_cast<size_t>(batch.sizes_size())) std::abort();
           if (!st.ok() && !keys.empty()) std::abort();
         }
       },
       [] {
         SeedList seeds;
         seeds.add(Keys(kKeys));
         seeds.add(Keys({}));
         return seeds.out;
       }},
      {"ucx_header",
       [](const uint8_t* data, size_t size) {
         auto request = transport::DecodeUcxRequest(data, size);
         auto reply = transport::DecodeUcxReply(data, size);
         if ((request.ok() || reply.ok()) && size != transport::kUcxHeaderSize) std::abort();
         if (request.ok() && transport::EncodeUcxRequest(*request) != [&] {
               transport::UcxHeader h{};
               std::memcpy(h.data(), data, h.size());
               return h;
             }()) {
           std::abort();  // a request decodes only from its own encoding
         }
       },
       [] {
         SeedList seeds;
         const auto h = transport::EncodeUcxRequest(
             {transport::kUcxProtocolVersion, transport::UcxOp::kStage, 7, 4096, 1 << 20});
         seeds.out.emplace_back(h.begin(), h.end());
         return seeds.out;
       }},
      {"ucx_stage_descriptor",
       [](const uint8_t* data, size_t size) {
         auto d = transport::DecodeUcxStageDescriptor(data, size);
         if (d.ok() &&
             transport::EncodeUcxStageDescriptor(*d) != std::vector<uint8_t>(data, data + size)) {
           std::abort();  // decode and encode are inverse
         }
       },
       [] {
         SeedList seeds;
         const auto d = transport::EncodeUcxStageDescriptor({3, 9, 8192, 2 << 20, "layer0/block7"});
         seeds.out.emplace_back(d.begin(), d.end());
         return seeds.out;
       }},
  };
  return targets;
}

void Quiet() { spdlog::set_level(spdlog::level::off); }

const Target* FindTarget(std::string_view name) {
  for (const Target& t : Targets()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace tierkv::fuzz
