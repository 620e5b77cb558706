// tierkv.DistributedStore (Mooncake's MooncakeDistributedStore API) and its value types: set-up,
// buffers, bytes through the local buffer, zero-copy, query and removal (docs/python.md).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "conversions.h"
#include "tierkv/config.h"

namespace tierkv::binding {
namespace {

using Store = DistributedStore;

int SetupPositional(Store& s, py::args args, py::kwargs kwargs) {
  static const char* kNames[] = {
      "local_hostname",     "metadata_server",  "global_segment_size", "local_buffer_size",
      "protocol",           "rdma_devices",     "master_server_addr",  "engine",
      "enable_ssd_offload", "ssd_offload_path", "tenant_id",           "enable_client_http_server",
      "client_http_port",   "token_file"};
  constexpr size_t kCount = sizeof(kNames) / sizeof(kNames[0]);
  if (args.size() > kCount) throw py::type_error("setup() takes at most 14 arguments");
  std::vector<py::object> v(kCount);
  for (size_t i = 0; i < args.size(); ++i) v[i] = args[i];
  for (auto [k, value] : kwargs) {
    std::string name = py::str(k);
    if (name == "device_name") name = "rdma_devices";
    if (name == "master_server_address") name = "master_server_addr";
    if (name == "transfer_engine") name = "engine";  // SGLang's keyword
    size_t i = 0;
    while (i < kCount && name != kNames[i]) ++i;
    if (i == kCount)
      throw py::type_error("setup() got an unexpected keyword argument '" + name + "'");
    if (v[i]) throw py::type_error("setup() got multiple values for argument '" + name + "'");
    v[i] = py::reinterpret_borrow<py::object>(value);
  }
  for (size_t i = 0; i < 7; ++i) {
    if (!v[i]) {
      throw py::type_error(std::string("setup() missing required argument '") + kNames[i] +
                           "' (or pass one dict: setup(config))");
    }
  }
  StoreSetupOptions o;
  auto str = [&](size_t i) { return v[i].cast<std::string>(); };
  auto size = [&](size_t i) -> std::optional<uint64_t> {
    if (py::isinstance<py::str>(v[i])) {
      auto parsed = ParseSize(str(i));
      if (!parsed.ok()) return std::nullopt;
      return *parsed;
    }
    return U64(v[i], kNames[i]);
  };
  o.local_hostname = str(0);
  o.metadata_server = str(1);
  auto global = size(2), local = size(3);
  if (!global || !local) return ToInt(ErrorCode::INVALID_CONFIG);
  o.global_segment_size = *global;
  o.local_buffer_size = *local;
  o.protocol = str(4);
  o.device_name = str(5);
  o.master_server_addr = str(6);
  if (v[7] && !v[7].is_none() &&
      PyErr_WarnEx(PyExc_UserWarning,
                   "setup(): the transfer engine passed is not used: tierkv moves bytes over its "
                   "own transports (protocol)",
                   1) != 0) {
    throw py::error_already_set();
  }
  if (v[8]) o.enable_ssd_offload = v[8].cast<bool>();
  if (v[9]) o.ssd_offload_path = str(9);
  if (v[10]) o.tenant_id = str(10);
  if (v[11] && v[11].cast<bool>()) return ToInt(ErrorCode::INVALID_CONFIG);
  if (v[13] && !v[13].is_none()) o.cluster_token_file = str(13);
  py::gil_scoped_release release;
  return s.Setup(o);
}

int SetupDict(Store& s, const py::dict& config) {
  std::string text;
  try {
    text = py::module_::import("json").attr("dumps")(config).cast<std::string>();
  } catch (const py::error_already_set& e) {
    // A value JSON cannot hold: an error code, as for any other bad setup value.
    return ToInt(ErrorCode::INVALID_CONFIG);
  }
  py::gil_scoped_release release;
  return s.SetupFromJson(text);
}

}  // namespace

void BindStore(py::module_& m) {
  py::enum_<SoftPinAction>(m, "SoftPinAction")
      .value("PRESERVE", SoftPinAction::kPreserve)
      .value("ENABLE", SoftPinAction::kEnable)
      .value("DISABLE", SoftPinAction::kDisable);

  py::class_<StoreReplicateConfig>(m, "ReplicateConfig")
      .def(py::init<>())
      .def_readwrite("replica_num", &StoreReplicateConfig::replica_num)
      .def_readwrite("with_hard_pin", &StoreReplicateConfig::with_hard_pin)
      .def_readwrite("with_soft_pin", &StoreReplicateConfig::with_soft_pin)
      .def_readwrite("soft_pin_action", &StoreReplicateConfig::soft_pin_action)
      .def_readwrite("soft_pin_ttl_ms", &StoreReplicateConfig::soft_pin_ttl_ms)
      .def_readwrite("preferred_segment", &StoreReplicateConfig::preferred_segment)
      .def_readwrite("preferred_segments", &StoreReplicateConfig::preferred_segments)
      .def_readwrite("prefer_alloc_in_same_node", &StoreReplicateConfig::prefer_alloc_in_same_node)
      .def_readwrite("group_ids", &StoreReplicateConfig::group_ids)
      .def_readwrite("parent_keys", &StoreReplicateConfig::parent_keys)
      .def("__str__", &StoreReplicateConfig::ToString)
      .def("__repr__", &StoreReplicateConfig::ToString);

  py::enum_<ReplicaTier>(m, "ReplicaTier")
      .value("MEMORY", ReplicaTier::kMemory)
      .value("DISK", ReplicaTier::kDisk);
  // Mooncake's ReplicaStatus, with its numbering; every replica tierkv reports belongs to a
  // complete object (COMPLETE).
  enum class ReplicaStatus {
    kUndefined = 0,
    kInitialized,
    kProcessing,
    kComplete,
    kRemoved,
    kFailed
  };
  py::enum_<ReplicaStatus>(m, "ReplicaStatus")
      .value("UNDEFINED", ReplicaStatus::kUndefined)
      .value("INITIALIZED", ReplicaStatus::kInitialized)
      .value("PROCESSING", ReplicaStatus::kProcessing)
      .value("COMPLETE", ReplicaStatus::kComplete)
      .value("REMOVED", ReplicaStatus::kRemoved)
      .value("FAILED", ReplicaStatus::kFailed)
      .export_values();
  // Mooncake's descriptors of a replica's place (docs/python.md, "Replica descriptors"): a
  // memory replica's buffer (its segment as the endpoint, its offset in the segment as the
  // address), a disk replica's record in its owner's SSD tier.
  struct BufferDescriptor {
    uint64_t size = 0;
    uint64_t buffer_address = 0;
    std::string transport_endpoint;
  };
  struct MemoryDescriptor {
    BufferDescriptor buffer_descriptor;
  };
  struct DiskDescriptor {
    std::string file_path;
    uint64_t object_size = 0;
  };
  py::class_<BufferDescriptor>(m, "Descriptor")
      .def_readonly("size_", &BufferDescriptor::size)
      .def_readonly("buffer_address_", &BufferDescriptor::buffer_address)
      .def_readonly("transport_endpoint_", &BufferDescriptor::transport_endpoint)
      .def("__repr__", [](const BufferDescriptor& d) {
        return "<Descriptor size=" + std::to_string(d.size) +
               " buffer_address=" + std::to_string(d.buffer_address) +
               " transport_endpoint=" + d.transport_endpoint + ">";
      });
  py::class_<MemoryDescriptor>(m, "MemoryDescriptor")
      .def_readonly("buffer_descriptor", &MemoryDescriptor::buffer_descriptor);
  py::class_<DiskDescriptor>(m, "DiskDescriptor")
      .def_readonly("file_path", &DiskDescriptor::file_path)
      .def_readonly("object_size", &DiskDescriptor::object_size);
  py::class_<StoreReplica>(m, "ReplicaDescriptor")
      .def_property_readonly("status", [](const StoreReplica&) { return ReplicaStatus::kComplete; })
      .def_readonly("tier", &StoreReplica::tier)
      .def_readonly("type", &StoreReplica::tier)
      .def("get_memory_descriptor",
           [](const StoreReplica& r) {
             if (r.tier != ReplicaTier::kMemory) {
               throw std::runtime_error("Expected MemoryDescriptor (a disk replica)");
             }
             return MemoryDescriptor{BufferDescriptor{r.size, r.offset, r.segment_name}};
           })
      .def("get_disk_descriptor",
           [](const StoreReplica& r) {
             if (r.tier != ReplicaTier::kDisk) {
               throw std::runtime_error("Expected DiskDescriptor (a memory replica)");
             }
             // Not a file of its own: a record in the owner's SSD tier, named by segment,
             // region and offset.
             return DiskDescriptor{
                 "tierkv-tier://" + r.segment_name.substr(0, r.segment_name.find('@')) +
                     "/region/" + std::to_string(r.region) + "/offset/" + std::to_string(r.offset),
                 r.size};
           })
      .def_readonly("segment_name", &StoreReplica::segment_name)
      .def_readonly("offset", &StoreReplica::offset)
      .def_readonly("size", &StoreReplica::size)
      .def("is_memory_replica",
           [](const StoreReplica& r) { return r.tier == ReplicaTier::kMemory; })
      .def("is_disk_replica", [](const StoreReplica& r) { return r.tier == ReplicaTier::kDisk; })
      .def("is_local_disk_replica",
           [](const StoreReplica& r) { return r.tier == ReplicaTier::kDisk && r.local; })
      .def("__repr__", [](const StoreReplica& r) {
        return std::string("<ReplicaDescriptor ") +
               (r.tier == ReplicaTier::kMemory ? "memory" : "disk") + " on " + r.segment_name +
               " size=" + std::to_string(r.size) + ">";
      });

  py::class_<PyBufferHandle>(m, "BufferHandle", py::buffer_protocol())
      .def("ptr",
           [](const PyBufferHandle& h) { return reinterpret_cast<uintptr_t>(h.handle->data()); })
      .def("size", [](const PyBufferHandle& h) { return h.handle->size(); })
      .def("len", [](const PyBufferHandle& h) { return h.handle->size(); })
      .def("__len__", [](const PyBufferHandle& h) { return h.handle->size(); })
      .def_buffer([](PyBufferHandle& h) {
        return py::buffer_info(const_cast<uint8_t*>(h.handle->data()), 1,
                               py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(h.handle->size())}, {1},
                               /*readonly=*/true);
      });

  StoreClass store(m, "DistributedStore");
  store.def(py::init<>());
  // ---- set-up
  store.def("setup", &SetupDict, py::arg("config"))
      .def("setup", &SetupPositional)
      .def("close",
           [](Store& s) {
             py::gil_scoped_release release;
             return s.Close();
           })
      .def("health_check",
           [](Store& s) {
             py::gil_scoped_release release;
             return s.HealthCheck();
           })
      .def(
          "setup_dummy",
          [](Store& s, uint64_t mem_pool_size, uint64_t local_buffer_size,
             const std::string& server_address) {
            py::gil_scoped_release release;
            return s.SetupDummy(mem_pool_size, local_buffer_size, server_address);
          },
          py::arg("mem_pool_size"), py::arg("local_buffer_size"), py::arg("server_address"))
      .def(
          "alloc_from_mem_pool",
          [](Store& s, uint64_t size) {
            py::gil_scoped_release release;
            return s.AllocFromMemPool(size);
          },
          py::arg("size"))
      .def("get_hostname", &Store::GetHostname)
      .def("last_error", &Store::last_error);
  // ---- buffers
  store
      .def(
          "register_buffer",
          [](Store& s, py::object buffer, py::object size) {
            Buffers b;
            Mem mem = b.Get(buffer, /*writable=*/false, "buffer_ptr");
            uint64_t n = 0;
            if (!size.is_none()) {
              n = U64(size, "size");
              if (mem.extent && n > *mem.extent) {
                throw py::value_error("size exceeds the buffer's " + std::to_string(*mem.extent) +
                                      " bytes");
              }
            } else if (mem.extent) {
              n = *mem.extent;
            } else {
              throw py::type_error("register_buffer(ptr, size): an int address needs a size");
            }
            py::gil_scoped_release release;
            return s.RegisterBuffer(mem.ptr, n);
          },
          py::arg("buffer_ptr"), py::arg("size") = py::none())
      .def(
          "unregister_buffer",
          [](Store& s, py::object buffer) {
            Buffers b;
            const uintptr_t ptr = b.Get(buffer, false, "buffer_ptr").ptr;
            py::gil_scoped_release release;
            return s.UnregisterBuffer(ptr);
          },
          py::arg("buffer_ptr"));
  // ---- bytes through the local buffer
  auto put_one = [](bool upsert) {
    return [upsert](Store& s, const std::string& key, py::object value, py::object config) {
      Buffers b;
      auto bytes = Bytes(b, value, "value");
      const StoreReplicateConfig c = ConfigOf(config);
      py::gil_scoped_release release;
      return upsert ? s.Upsert(key, bytes, c) : s.Put(key, bytes, c);
    };
  };
  auto put_parts = [](bool upsert) {
    return [upsert](Store& s, const std::string& key, py::args parts, py::kwargs kwargs) {
      StoreReplicateConfig c;
      for (auto [k, v] : kwargs) {
        if (std::string(py::str(k)) != "config") {
          throw py::type_error("unexpected keyword argument '" + std::string(py::str(k)) + "'");
        }
        c = ConfigOf(py::reinterpret_borrow<py::object>(v));
      }
      Buffers b;
      std::vector<std::span<const uint8_t>> spans;
      for (size_t i = 0; i < parts.size(); ++i) {
        spans.push_back(Bytes(b, parts[i], "parts[" + std::to_string(i) + "]"));
      }
      py::gil_scoped_release release;
      return upsert ? s.UpsertParts(key, spans, c) : s.PutParts(key, spans, c);
    };
  };
  auto put_batch = [](bool upsert) {
    return [upsert](Store& s, py::object keys, py::object values, py::object config) {
      Buffers b;
      const auto k = Strings(keys, "keys");
      std::vector<std::span<const uint8_t>> spans;
      const auto items = Items(values, "values");
      for (size_t i = 0; i < items.size(); ++i) {
        spans.push_back(Bytes(b, items[i], "values[" + std::to_string(i) + "]"));
      }
      const StoreReplicateConfig c = ConfigOf(config);
      py::gil_scoped_release release;
      return upsert ? s.UpsertBatch(k, spans, c) : s.PutBatch(k, spans, c);
    };
  };
  store.def("put", put_one(false), py::arg("key"), py::arg("value"), py::arg("config") = py::none())
      .def("upsert", put_one(true), py::arg("key"), py::arg("value"),
           py::arg("config") = py::none())
      .def("put_parts", put_parts(false), py::arg("key"))
      .def("upsert_parts", put_parts(true), py::arg("key"))
      .def("put_batch", put_batch(false), py::arg("keys"), py::arg("values"),
           py::arg("config") = py::none())
      .def("upsert_batch", put_batch(true), py::arg("keys"), py::arg("values"),
           py::arg("config") = py::none())
      .def(
          "get",
          [](Store& s, const std::string& key) -> py::bytes {
            Result<std::shared_ptr<const BufferHandle>> r(ErrorCode::INTERNAL_ERROR, "");
            {
              py::gil_scoped_release release;
              r = s.GetBuffer(key);
            }
            if (!r.ok()) return py::bytes();
            return ToBytes(**r);
          },
          py::arg("key"))
      .def(
          "get_batch",
          [](Store& s, py::object keys) {
            const auto k = Strings(keys, "keys");
            auto results = Release<Result<std::shared_ptr<const BufferHandle>>>(
                [&] { return s.BatchGetBuffer(k); });
            py::list out;
            for (auto& r : results) out.append(r.ok() ? ToBytes(**r) : py::bytes());
            return out;
          },
          py::arg("keys"))
      .def(
          "get_buffer",
          [](Store& s, const std::string& key) {
            Result<std::shared_ptr<const BufferHandle>> r(ErrorCode::INTERNAL_ERROR, "");
            {
              py::gil_scoped_release release;
              r = s.GetBuffer(key);
            }
            return MaybeHandle(r);
          },
          py::arg("key"))
      .def(
          "batch_get_buffer",
          [](Store& s, py::object keys) {
            const auto k = Strings(keys, "keys");
            auto results = Release<Result<std::shared_ptr<const BufferHandle>>>(
                [&] { return s.BatchGetBuffer(k); });
            py::list out;
            for (auto& r : results) out.append(MaybeHandle(r));
            return out;
          },
          py::arg("keys"));
  // ---- zero-copy
  auto from_one = [](bool upsert) {
    return [upsert](Store& s, const std::string& key, py::object buffer, py::object size,
                    py::object config) {
      Buffers b;
      const uint64_t n = U64(size, "size");
      const uintptr_t ptr = b.Sized(buffer, n, false, "buffer_ptr");
      const StoreReplicateConfig c = ConfigOf(config);
      py::gil_scoped_release release;
      return upsert ? s.UpsertFrom(key, ptr, n, c) : s.PutFrom(key, ptr, n, c);
    };
  };
  auto from_batch = [](bool upsert) {
    return
        [upsert](Store& s, py::object keys, py::object ptrs, py::object sizes, py::object config) {
          Buffers b;
          const auto k = Strings(keys, "keys");
          const auto n = U64List(sizes, "sizes");
          const auto p = PtrList(b, ptrs, &n, false, "buffer_ptrs");
          const StoreReplicateConfig c = ConfigOf(config);
          py::gil_scoped_release release;
          return upsert ? s.BatchUpsertFrom(k, p, n, c) : s.BatchPutFrom(k, p, n, c);
        };
  };
  auto from_multi = [](bool upsert) {
    return
        [upsert](Store& s, py::object keys, py::object ptrs, py::object sizes, py::object config) {
          Buffers b;
          const auto k = Strings(keys, "keys");
          PtrLists p;
          SizeLists n;
          NestedLists(b, ptrs, sizes, false, p, n);
          const StoreReplicateConfig c = ConfigOf(config);
          py::gil_scoped_release release;
          return upsert ? s.BatchUpsertFromMultiBuffers(k, p, n, c)
                        : s.BatchPutFromMultiBuffers(k, p, n, c);
        };
  };
  store
      .def("put_from", from_one(false), py::arg("key"), py::arg("buffer_ptr"), py::arg("size"),
           py::arg("config") = py::none())
      .def("upsert_from", from_one(true), py::arg("key"), py::arg("buffer_ptr"), py::arg("size"),
           py::arg("config") = py::none())
      .def("batch_put_from", from_batch(false), py::arg("keys"), py::arg("buffer_ptrs"),
           py::arg("sizes"), py::arg("config") = py::none())
      .def("batch_upsert_from", from_batch(true), py::arg("keys"), py::arg("buffer_ptrs"),
           py::arg("sizes"), py::arg("config") = py::none())
      .def("batch_put_from_multi_buffers", from_multi(false), py::arg("keys"),
           py::arg("all_buffer_ptrs"), py::arg("all_sizes"), py::arg("config") = py::none())
      .def("batch_upsert_from_multi_buffers", from_multi(true), py::arg("keys"),
           py::arg("all_buffer_ptrs"), py::arg("all_sizes"), py::arg("config") = py::none())
      .def(
          "get_into",
          [](Store& s, const std::string& key, py::object buffer, py::object size) {
            Buffers b;
            const uint64_t n = U64(size, "size");
            const uintptr_t ptr = b.Sized(buffer, n, true, "buffer_ptr");
            py::gil_scoped_release release;
            return s.GetInto(key, ptr, n);
          },
          py::arg("key"), py::arg("buffer_ptr"), py::arg("size"))
      .def(
          "batch_get_into",
          [](Store& s, py::object keys, py::object ptrs, py::object sizes) {
            Buffers b;
            const auto k = Strings(keys, "keys");
            const auto n = U64List(sizes, "sizes");
            const auto p = PtrList(b, ptrs, &n, true, "buffer_ptrs");
            py::gil_scoped_release release;
            return s.BatchGetInto(k, p, n);
          },
          py::arg("keys"), py::arg("buffer_ptrs"), py::arg("sizes"))
      .def(
          "batch_get_into_multi_buffers",
          [](Store& s, py::object keys, py::object ptrs, py::object sizes, bool /*same_node*/) {
            Buffers b;
            const auto k = Strings(keys, "keys");
            PtrLists p;
            SizeLists n;
            NestedLists(b, ptrs, sizes, true, p, n);
            py::gil_scoped_release release;
            return s.BatchGetIntoMultiBuffers(k, p, n);
          },
          py::arg("keys"), py::arg("all_buffer_ptrs"), py::arg("all_sizes"),
          py::arg("prefer_alloc_in_same_node") = false)
      .def(
          "batch_get_session_start",
          [](Store& s, py::object keys) {
            const auto k = Strings(keys, "keys");
            py::gil_scoped_release release;
            return s.BatchGetSessionStart(k);
          },
          py::arg("keys"))
      .def(
          "batch_get_into_multi_buffer_ranges",
          [](Store& s, py::object keys, py::object ptrs, py::object sizes, py::object offsets) {
            Buffers b;
            const auto k = Strings(keys, "keys");
            PtrLists p;
            SizeLists n;
            NestedLists(b, ptrs, sizes, true, p, n);
            SizeLists o;
            for (const auto& item : Items(offsets, "all_src_offsets")) {
              o.push_back(U64List(item, "all_src_offsets[i]"));
            }
            py::gil_scoped_release release;
            return s.BatchGetIntoMultiBufferRanges(k, p, n, o);
          },
          py::arg("keys"), py::arg("all_buffer_ptrs"), py::arg("all_sizes"),
          py::arg("all_src_offsets"))
      .def(
          "batch_get_session_end",
          [](Store& s, py::object keys) {
            const auto k = Strings(keys, "keys");
            py::gil_scoped_release release;
            return s.BatchGetSessionEnd(k);
          },
          py::arg("keys"))
      .def(
          "get_into_ranges",
          [](Store& s, py::object buffer_ptrs, py::object all_keys, py::object dst, py::object src,
             py::object sizes) {
            Buffers b;
            const auto ptrs = PtrList(b, buffer_ptrs, nullptr, true, "buffer_ptrs");
            std::vector<std::vector<std::string>> keys;
            for (const auto& item : Items(all_keys, "all_keys")) {
              keys.push_back(Strings(item, "all_keys[i]"));
            }
            auto three = [](py::handle h, const char* what) {
              std::vector<std::vector<std::vector<uint64_t>>> out;
              for (const auto& per_buffer : Items(h, what)) {
                auto& o = out.emplace_back();
                for (const auto& per_key : Items(per_buffer, what)) {
                  o.push_back(U64List(per_key, what));
                }
              }
              return out;
            };
            const auto d = three(dst, "all_dst_offsets");
            const auto so = three(src, "all_src_offsets");
            const auto n = three(sizes, "all_sizes");
            py::gil_scoped_release release;
            return s.GetIntoRanges(ptrs, keys, d, so, n);
          },
          py::arg("buffer_ptrs"), py::arg("all_keys"), py::arg("all_dst_offsets"),
          py::arg("all_src_offsets"), py::arg("all_sizes"));
  // ---- query and removal
  store
      .def(
          "is_exist",
          [](Store& s, const std::string& key) {
            py::gil_scoped_release release;
            return s.IsExist(key);
          },
          py::arg("key"))
      .def(
          "batch_is_exist",
          [](Store& s, py::object keys) {
            const KeyViews k = ReusedKeyViews(keys, "keys");
            py::gil_scoped_release release;
            return s.BatchIsExistViews(*k.views);
          },
          py::arg("keys"))
      .def(
          "get_size",
          [](Store& s, const std::string& key) {
            py::gil_scoped_release release;
            return s.GetSize(key);
          },
          py::arg("key"))
      .def(
          "remove",
          [](Store& s, const std::string& key, bool force) {
            py::gil_scoped_release release;
            return s.Remove(key, force);
          },
          py::arg("key"), py::arg("force") = false)
      .def(
          "batch_remove",
          [](Store& s, py::object keys, bool force) {
            const auto k = Strings(keys, "keys");
            py::gil_scoped_release release;
            return s.BatchRemove(k, force);
          },
          py::arg("keys"), py::arg("force") = false)
      .def(
          "remove_by_regex",
          [](Store& s, const std::string& regex, bool force) {
            py::gil_scoped_release release;
            return s.RemoveByRegex(regex, force);
          },
          py::arg("regex_pattern"), py::arg("force") = false)
      .def(
          "batch_replica_clear",
          [](Store& s, py::object keys, const std::string& segment_name) {
            const auto k = Strings(keys, "keys");
            std::vector<int> codes;
            {
              py::gil_scoped_release release;
              codes = s.BatchReplicaClear(k, segment_name);
            }
            // Mooncake returns the keys it cleared; the rest were skipped (leased, absent, no
            // replica on that segment, ...).
            std::vector<std::string> cleared;
            for (size_t i = 0; i < k.size() && i < codes.size(); ++i) {
              if (codes[i] == 0) cleared.push_back(k[i]);
            }
            return cleared;
          },
          py::arg("keys"), py::arg("segment_name") = "")
      .def(
          "remove_all",
          [](Store& s, bool force) {
            py::gil_scoped_release release;
            return s.RemoveAll(force);
          },
          py::arg("force") = false)
      .def(
          "get_replica_desc",
          [](Store& s, const std::string& key) {
            auto r = Release<Result<std::vector<StoreReplica>>>(
                [&] { return s.BatchGetReplicaDesc({key}); });
            return r[0].ok() ? *r[0] : std::vector<StoreReplica>{};
          },
          py::arg("key"))
      .def(
          "batch_get_replica_desc",
          [](Store& s, py::object keys) {
            const auto k = Strings(keys, "keys");
            auto r = Release<Result<std::vector<StoreReplica>>>(
                [&] { return s.BatchGetReplicaDesc(k); });
            py::dict out;
            for (size_t i = 0; i < k.size(); ++i) {
              if (r[i].ok()) out[py::str(k[i])] = py::cast(*r[i]);
            }
            return out;
          },
          py::arg("keys"));
  BindStoreTensors(store);
}

}  // namespace tierkv::binding
