// The Python module tierkv._tierkv (docs/python.md): a thin pybind11 binding of
// tierkv::DistributedStore and tierkv::connector. It converts types (ints or buffer-protocol
// objects or torch tensors to addresses, lists to vectors, results to Python objects), releases
// the GIL around every call into the store, and holds no logic of its own.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tierkv/config.h"
#include "tierkv/connector.h"
#include "tierkv/distributed_store.h"
#include "tierkv/status.h"

namespace py = pybind11;

namespace tierkv {
namespace {

// ---- argument conversion ------------------------------------------------------------------

// A non-negative integer argument; a clear ValueError otherwise (pybind's own unsigned caster
// reports a negative value as an unmatched overload).
uint64_t U64(py::handle h, const char* what) {
  if (!PyLong_Check(h.ptr())) {
    throw py::type_error(std::string(what) + " must be an int, got " +
                         std::string(py::str(py::type::of(h).attr("__name__"))));
  }
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(h.ptr(), &overflow);
  if (overflow == 0 && v < 0) {
    throw py::value_error(std::string(what) + " must not be negative, got " + std::to_string(v));
  }
  if (overflow < 0) throw py::value_error(std::string(what) + " must not be negative");
  const unsigned long long u = PyLong_AsUnsignedLongLong(h.ptr());
  if (u == static_cast<unsigned long long>(-1) && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::value_error(std::string(what) + " does not fit in 64 bits");
  }
  return static_cast<uint64_t>(u);
}

bool IsTorchTensor(py::handle h) {
  py::object type = py::type::of(h);
  return std::string(py::str(type.attr("__module__"))) == "torch" &&
         std::string(py::str(type.attr("__name__"))) == "Tensor";
}

// A buffer argument: an int address (as engines pass tensor.data_ptr()), a torch tensor on the
// CPU, or a C-contiguous object supporting the buffer protocol (numpy arrays, bytearray,
// memoryview). `extent` is known for objects; the Python object is kept while the call runs.
struct Mem {
  uintptr_t ptr = 0;
  std::optional<uint64_t> extent;
};

class Buffers {
 public:
  Mem Get(py::handle h, bool writable, const std::string& what) {
    if (PyLong_Check(h.ptr())) return Mem{static_cast<uintptr_t>(U64(h, what.c_str())), {}};
    if (IsTorchTensor(h)) {
      if (std::string(py::str(h.attr("device").attr("type"))) != "cpu") {
        throw py::type_error(what +
                             ": the tensor must be on the CPU (pass its data_ptr() "
                             "for a registered device buffer)");
      }
      if (!h.attr("is_contiguous")().cast<bool>()) {
        throw py::value_error(what + ": the tensor is not contiguous");
      }
      const uint64_t bytes =
          h.attr("numel")().cast<uint64_t>() * h.attr("element_size")().cast<uint64_t>();
      keep_.push_back(py::reinterpret_borrow<py::object>(h));
      return Mem{h.attr("data_ptr")().cast<uintptr_t>(), bytes};
    }
    if (PyObject_CheckBuffer(h.ptr())) {
      auto view = std::make_unique<Py_buffer>();
      const int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
      if (PyObject_GetBuffer(h.ptr(), view.get(), flags) != 0) {
        PyErr_Clear();
        throw py::value_error(what + (writable ? ": the buffer must be C-contiguous and writable"
                                               : ": the buffer must be C-contiguous"));
      }
      Mem m{reinterpret_cast<uintptr_t>(view->buf), static_cast<uint64_t>(view->len)};
      views_.push_back(std::move(view));
      return m;
    }
    throw py::type_error(what +
                         ": expected an int address, a CPU torch tensor or an object "
                         "supporting the buffer protocol, got " +
                         std::string(py::str(py::type::of(h).attr("__name__"))));
  }
  // Get() with an explicit size, checked against the object's extent.
  uintptr_t Sized(py::handle h, uint64_t size, bool writable, const std::string& what) {
    Mem m = Get(h, writable, what);
    if (m.extent && size > *m.extent) {
      throw py::value_error(what + ": size " + std::to_string(size) + " exceeds the buffer's " +
                            std::to_string(*m.extent) + " bytes");
    }
    return m.ptr;
  }
  ~Buffers() {
    for (auto& v : views_) PyBuffer_Release(v.get());
  }

 private:
  std::vector<std::unique_ptr<Py_buffer>> views_;
  std::vector<py::object> keep_;
};

// A list or tuple is read through PySequence_Fast's item array (no new reference per item:
// batch_is_exist over 1024 keys spends most of its binding time here); other sequences are
// copied into a list first.
py::object FastSequence(py::handle list, const std::string& what) {
  if (!PySequence_Check(list.ptr()) || PyUnicode_Check(list.ptr()) || PyBytes_Check(list.ptr())) {
    throw py::type_error(what + " must be a list");
  }
  PyObject* fast = PySequence_Fast(list.ptr(), "not a sequence");
  if (fast == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fast);
}

std::vector<std::string> Strings(py::handle list, const char* what) {
  if (PyUnicode_Check(list.ptr()) || !PySequence_Check(list.ptr())) {
    throw py::type_error(std::string(what) + " must be a list of str");
  }
  const py::object fast = FastSequence(list, what);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_ssize_t len = 0;
    const char* s = PyUnicode_Check(items[i]) ? PyUnicode_AsUTF8AndSize(items[i], &len) : nullptr;
    if (s == nullptr) {
      PyErr_Clear();
      throw py::type_error(std::string(what) + "[" + std::to_string(i) + "] must be a str");
    }
    out.emplace_back(s, static_cast<size_t>(len));
  }
  return out;
}

// batch_is_exist's keys, in a vector kept per thread: assigning into strings that keep their
// capacity saves a malloc and a free per key on the engines' most frequent metadata call. The
// vector is used only until the call returns, and no Python code runs on this thread meanwhile.
const std::vector<std::string>& ReusedStrings(py::handle list, const char* what) {
  thread_local std::vector<std::string> out;
  if (PyUnicode_Check(list.ptr()) || !PySequence_Check(list.ptr())) {
    throw py::type_error(std::string(what) + " must be a list of str");
  }
  const py::object fast = FastSequence(list, what);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  out.resize(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    Py_ssize_t len = 0;
    const char* s = PyUnicode_Check(items[i]) ? PyUnicode_AsUTF8AndSize(items[i], &len) : nullptr;
    if (s == nullptr) {
      PyErr_Clear();
      throw py::type_error(std::string(what) + "[" + std::to_string(i) + "] must be a str");
    }
    out[static_cast<size_t>(i)].assign(s, static_cast<size_t>(len));
  }
  return out;
}

std::vector<py::object> Items(py::handle list, const std::string& what) {
  const py::object fast = FastSequence(list, what);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  std::vector<py::object> out;
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) out.push_back(py::reinterpret_borrow<py::object>(items[i]));
  return out;
}

std::vector<uint64_t> U64List(py::handle list, const std::string& what) {
  std::vector<uint64_t> out;
  size_t i = 0;
  for (const auto& item : Items(list, what)) {
    out.push_back(U64(item, (what + "[" + std::to_string(i++) + "]").c_str()));
  }
  return out;
}

std::vector<uintptr_t> PtrList(Buffers& buffers, py::handle list,
                               const std::vector<uint64_t>* sizes, bool writable,
                               const std::string& what) {
  std::vector<uintptr_t> out;
  size_t i = 0;
  for (const auto& item : Items(list, what)) {
    const std::string name = what + "[" + std::to_string(i) + "]";
    out.push_back(sizes != nullptr && i < sizes->size()
                      ? buffers.Sized(item, (*sizes)[i], writable, name)
                      : buffers.Get(item, writable, name).ptr);
    ++i;
  }
  return out;
}

using PtrLists = std::vector<std::vector<uintptr_t>>;
using SizeLists = std::vector<std::vector<uint64_t>>;

void NestedLists(Buffers& buffers, py::handle ptrs, py::handle sizes, bool writable,
                 PtrLists& out_ptrs, SizeLists& out_sizes) {
  const auto size_items = Items(sizes, "all_sizes");
  for (size_t i = 0; i < size_items.size(); ++i) {
    out_sizes.push_back(U64List(size_items[i], "all_sizes[" + std::to_string(i) + "]"));
  }
  const auto ptr_items = Items(ptrs, "all_buffer_ptrs");
  for (size_t i = 0; i < ptr_items.size(); ++i) {
    out_ptrs.push_back(PtrList(buffers, ptr_items[i],
                               i < out_sizes.size() ? &out_sizes[i] : nullptr, writable,
                               "all_buffer_ptrs[" + std::to_string(i) + "]"));
  }
}

// A read-only span over a bytes-like value (bytes, bytearray, memoryview, numpy, ...).
std::span<const uint8_t> Bytes(Buffers& buffers, py::handle h, const std::string& what) {
  if (PyLong_Check(h.ptr())) throw py::type_error(what + " must be bytes-like, not an int");
  Mem m = buffers.Get(h, /*writable=*/false, what);
  return {reinterpret_cast<const uint8_t*>(m.ptr), static_cast<size_t>(*m.extent)};
}

StoreReplicateConfig ConfigOf(const py::object& config) {
  if (config.is_none()) return {};
  return config.cast<StoreReplicateConfig>();
}

// ---- results -------------------------------------------------------------------------------

// A bytes object filled without the GIL (the copy of a large object does not stall others).
py::bytes ToBytes(const BufferHandle& h) {
  PyObject* out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(h.size()));
  if (out == nullptr) throw py::error_already_set();
  {
    py::gil_scoped_release release;
    if (h.size() > 0) std::memcpy(PyBytes_AS_STRING(out), h.data(), h.size());
  }
  return py::reinterpret_steal<py::bytes>(out);
}

// The Python side of a BufferHandle (buffer protocol, ptr(), size(), len()).
struct PyBufferHandle {
  std::shared_ptr<const BufferHandle> handle;
};

py::object MaybeHandle(Result<std::shared_ptr<const BufferHandle>>& r) {
  if (!r.ok()) return py::none();
  return py::cast(PyBufferHandle{std::move(*r)});
}

// ---- torch ---------------------------------------------------------------------------------

// torch.dtype <-> Mooncake's TensorDtype codes, built on first use (importing torch is slow).
struct TorchTypes {
  py::object torch;
  py::dict to_code;
  py::dict from_code;
};

TorchTypes& Torch() {
  // Built under the GIL without a C++ static guard: importing torch may release the GIL, and a
  // second thread blocked on a static's guard while holding the GIL would deadlock. Two threads
  // may both build the table the first time; one copy wins (the other leaks, once).
  static TorchTypes* types = nullptr;
  if (types != nullptr) return *types;
  auto* t = new TorchTypes();  // leaked on purpose: no teardown order issues at exit
  t->torch = py::module_::import("torch");
  static const char* kNames[] = {"float32", "float64", "int8",     "uint8",         "int16",
                                 "uint16",  "int32",   "uint32",   "int64",         "uint64",
                                 "bool",    "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"};
  for (int code = 0; code < 15; ++code) {
    if (!py::hasattr(t->torch, kNames[code])) continue;  // older torch lacks some
    py::object dtype = t->torch.attr(kNames[code]);
    t->to_code[dtype] = code;
    t->from_code[py::int_(code)] = dtype;
  }
  if (types == nullptr) types = t;
  return *types;
}

// A CPU tensor as a TensorView (made contiguous first: `keep` holds the copy).
TensorView ViewOf(py::handle tensor, std::vector<py::object>& keep, const std::string& what) {
  if (!IsTorchTensor(tensor)) throw py::type_error(what + " must be a torch.Tensor");
  if (std::string(py::str(tensor.attr("device").attr("type"))) != "cpu") {
    throw py::type_error(what + ": only CPU tensors are stored (move it with .cpu())");
  }
  py::object t = tensor.attr("contiguous")();
  keep.push_back(t);
  TorchTypes& torch = Torch();
  py::object dtype = t.attr("dtype");
  if (!torch.to_code.contains(dtype)) {
    throw py::type_error(what + ": unsupported dtype " + std::string(py::str(dtype)));
  }
  TensorView v;
  v.info.dtype = torch.to_code[dtype].cast<int32_t>();
  for (auto d : t.attr("shape")) v.info.shape.push_back(d.cast<int64_t>());
  v.data = reinterpret_cast<const void*>(t.attr("data_ptr")().cast<uintptr_t>());
  v.nbytes = t.attr("numel")().cast<uint64_t>() * t.attr("element_size")().cast<uint64_t>();
  return v;
}

py::object DtypeOf(int32_t code) {
  TorchTypes& torch = Torch();
  py::int_ key(code);
  if (!torch.from_code.contains(key)) {
    throw py::type_error("the stored tensor's dtype (code " + std::to_string(code) +
                         ") has no torch equivalent in this torch version");
  }
  return torch.from_code[key];
}

py::tuple ShapeOf(const TensorInfo& info) {
  py::tuple shape(info.shape.size());
  for (size_t i = 0; i < info.shape.size(); ++i) shape[i] = py::int_(info.shape[i]);
  return shape;
}

// A new tensor holding a stored tensor's payload, or None.
py::object ToTensor(Result<StoredTensor>& t) {
  if (!t.ok()) return py::none();
  py::object out =
      Torch().torch.attr("empty")(ShapeOf(t->info), py::arg("dtype") = DtypeOf(t->info.dtype));
  auto* dst = reinterpret_cast<void*>(out.attr("data_ptr")().cast<uintptr_t>());
  {
    py::gil_scoped_release release;
    if (t->payload_bytes > 0) {
      std::memcpy(dst, t->bytes->data() + t->payload_offset, t->payload_bytes);
    }
  }
  return out;
}

// A tensor viewing [ptr, ptr + payload) in the caller's buffer (Mooncake's get_tensor_into).
py::object TensorAt(uintptr_t ptr, const TensorInfo& info) {
  py::object dtype = DtypeOf(info.dtype);
  const uint64_t payload = TensorPayloadBytes(info);
  if (payload == 0) return Torch().torch.attr("empty")(ShapeOf(info), py::arg("dtype") = dtype);
  py::object byte = py::module_::import("ctypes").attr("c_uint8");
  py::object array_type = py::reinterpret_steal<py::object>(
      PyNumber_Multiply(byte.ptr(), py::int_(payload).ptr()));  // ctypes.c_uint8 * payload
  if (!array_type) throw py::error_already_set();
  py::object array = array_type.attr("from_address")(py::int_(ptr + kTensorHeaderBytes));
  return Torch()
      .torch.attr("frombuffer")(array, py::arg("dtype") = dtype)
      .attr("reshape")(ShapeOf(info));
}

// ---- the store -----------------------------------------------------------------------------

using Store = DistributedStore;

int SetupPositional(Store& s, py::args args, py::kwargs kwargs) {
  static const char* kNames[] = {
      "local_hostname",     "metadata_server",  "global_segment_size", "local_buffer_size",
      "protocol",           "rdma_devices",     "master_server_addr",  "engine",
      "enable_ssd_offload", "ssd_offload_path", "tenant_id",           "enable_client_http_server",
      "client_http_port"};
  constexpr size_t kCount = sizeof(kNames) / sizeof(kNames[0]);
  if (args.size() > kCount) throw py::type_error("setup() takes at most 13 arguments");
  std::vector<py::object> v(kCount);
  for (size_t i = 0; i < args.size(); ++i) v[i] = args[i];
  for (auto [k, value] : kwargs) {
    std::string name = py::str(k);
    if (name == "device_name") name = "rdma_devices";
    if (name == "master_server_address") name = "master_server_addr";
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
  if (v[7] && !v[7].is_none()) {
    throw py::type_error("setup(): engine must be None (tierkv has no TransferEngine to share)");
  }
  if (v[8]) o.enable_ssd_offload = v[8].cast<bool>();
  if (v[9]) o.ssd_offload_path = str(9);
  if (v[10] && str(10) != "default") return ToInt(ErrorCode::INVALID_CONFIG);
  if (v[11] && v[11].cast<bool>()) return ToInt(ErrorCode::INVALID_CONFIG);
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

template <typename T>
std::vector<T> Release(const std::function<std::vector<T>()>& call) {
  py::gil_scoped_release release;
  return call();
}

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
  // Mooncake's ReplicaStatus: every replica tierkv reports belongs to a complete object.
  enum class ReplicaStatus { kComplete = 3 };
  py::enum_<ReplicaStatus>(m, "ReplicaStatus").value("COMPLETE", ReplicaStatus::kComplete);
  py::class_<StoreReplica>(m, "ReplicaDescriptor")
      .def_property_readonly("status", [](const StoreReplica&) { return ReplicaStatus::kComplete; })
      .def_readonly("tier", &StoreReplica::tier)
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

  py::class_<Store, std::shared_ptr<Store>> store(m, "DistributedStore");
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
            const std::vector<std::string>& k = ReusedStrings(keys, "keys");
            py::gil_scoped_release release;
            return s.BatchIsExist(k);
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
  // ---- tensors
  auto put_tensor = [](bool upsert) {
    return [upsert](Store& s, const std::string& key, py::object tensor, py::object config) {
      std::vector<py::object> keep;
      const TensorView v = ViewOf(tensor, keep, "tensor");
      const StoreReplicateConfig c = ConfigOf(config);
      py::gil_scoped_release release;
      return upsert ? s.UpsertTensor(key, v, c) : s.PutTensor(key, v, c);
    };
  };
  auto batch_put_tensor = [](bool upsert) {
    return [upsert](Store& s, py::object keys, py::object tensors, py::object config) {
      std::vector<py::object> keep;
      const auto k = Strings(keys, "keys");
      std::vector<TensorView> views;
      const auto items = Items(tensors, "tensors_list");
      for (size_t i = 0; i < items.size(); ++i) {
        views.push_back(ViewOf(items[i], keep, "tensors_list[" + std::to_string(i) + "]"));
      }
      const StoreReplicateConfig c = ConfigOf(config);
      py::gil_scoped_release release;
      return upsert ? s.BatchUpsertTensor(k, views, c) : s.BatchPutTensor(k, views, c);
    };
  };
  auto get_tensor = [](Store& s, const std::string& key) {
    Result<StoredTensor> t(ErrorCode::INTERNAL_ERROR, "");
    {
      py::gil_scoped_release release;
      t = s.GetTensor(key);
    }
    return ToTensor(t);
  };
  store
      .def("put_tensor", put_tensor(false), py::arg("key"), py::arg("tensor"),
           py::arg("config") = py::none())
      .def("pub_tensor", put_tensor(false), py::arg("key"), py::arg("tensor"),
           py::arg("config") = py::none())
      .def("upsert_tensor", put_tensor(true), py::arg("key"), py::arg("tensor"),
           py::arg("config") = py::none())
      .def("upsert_pub_tensor", put_tensor(true), py::arg("key"), py::arg("tensor"),
           py::arg("config") = py::none())
      .def("batch_put_tensor", batch_put_tensor(false), py::arg("keys"), py::arg("tensors_list"),
           py::arg("config") = py::none())
      .def("batch_pub_tensor", batch_put_tensor(false), py::arg("keys"), py::arg("tensors_list"),
           py::arg("config") = py::none())
      .def("batch_upsert_tensor", batch_put_tensor(true), py::arg("keys"), py::arg("tensors_list"),
           py::arg("config") = py::none())
      .def("get_tensor", get_tensor, py::arg("key"))
      .def(
          "batch_get_tensor",
          [](Store& s, py::object keys) {
            const auto k = Strings(keys, "keys");
            auto results = Release<Result<StoredTensor>>([&] { return s.BatchGetTensor(k); });
            py::list out;
            for (auto& t : results) out.append(ToTensor(t));
            return out;
          },
          py::arg("keys"))
      .def(
          "get_tensor_into",
          [](Store& s, const std::string& key, py::object buffer, py::object size) -> py::object {
            if (IsTorchTensor(buffer) && size.is_none()) {
              // A destination tensor: its dtype and shape must be the stored tensor's.
              std::vector<py::object> keep;
              if (!buffer.attr("is_contiguous")().cast<bool>()) {
                throw py::value_error("get_tensor_into: the destination is not contiguous");
              }
              const TensorView v = ViewOf(buffer, keep, "tensor");
              py::gil_scoped_release release;
              return py::int_(s.GetTensorIntoTensor(key, v.info,
                                                    reinterpret_cast<uintptr_t>(v.data), v.nbytes));
            }
            Buffers b;
            const uint64_t n = U64(size, "size");
            const uintptr_t ptr = b.Sized(buffer, n, true, "buffer_ptr");
            Result<TensorInfo> info(ErrorCode::INTERNAL_ERROR, "");
            {
              py::gil_scoped_release release;
              info = s.GetTensorInto(key, ptr, n);
            }
            if (!info.ok()) return py::none();
            return TensorAt(ptr, *info);
          },
          py::arg("key"), py::arg("buffer_ptr"), py::arg("size") = py::none())
      .def(
          "batch_get_tensor_into",
          [](Store& s, py::object keys, py::object ptrs, py::object sizes) {
            Buffers b;
            const auto k = Strings(keys, "keys");
            const auto n = U64List(sizes, "sizes");
            const auto p = PtrList(b, ptrs, &n, true, "buffer_ptrs");
            auto infos = Release<Result<TensorInfo>>([&] { return s.BatchGetTensorInto(k, p, n); });
            py::list out;
            for (size_t i = 0; i < infos.size(); ++i) {
              out.append(infos[i].ok() ? TensorAt(p[i], *infos[i]) : py::none());
            }
            return out;
          },
          py::arg("keys"), py::arg("buffer_ptrs"), py::arg("sizes"))
      .def(
          "put_tensor_from",
          [](Store& s, const std::string& key, py::object buffer, py::object size) {
            Buffers b;
            const uint64_t n = U64(size, "size");
            const uintptr_t ptr = b.Sized(buffer, n, false, "buffer_ptr");
            py::gil_scoped_release release;
            return s.PutTensorFrom(key, ptr, n);
          },
          py::arg("key"), py::arg("buffer_ptr"), py::arg("size"))
      .def(
          "put_tensor_with_tp",
          [](Store& s, const std::string& key, py::object tensor, int /*tp_rank*/, int tp_size,
             int split_dim) {
            std::vector<py::object> keep;
            const TensorView v = ViewOf(tensor, keep, "tensor");
            py::gil_scoped_release release;
            return s.PutTensorWithTp(key, v, tp_size, split_dim);
          },
          py::arg("key"), py::arg("tensor"), py::arg("tp_rank") = 0, py::arg("tp_size") = 1,
          py::arg("split_dim") = 0)
      .def(
          "get_tensor_with_tp",
          [get_tensor](Store& s, const std::string& key, int tp_rank, int tp_size,
                       int /*split_dim*/) {
            return get_tensor(s, Store::TpKey(key, tp_rank, tp_size));
          },
          py::arg("key"), py::arg("tp_rank") = 0, py::arg("tp_size") = 1, py::arg("split_dim") = 0);
}

// ---- tierkv.connector ----------------------------------------------------------------------

template <typename T>
T Check(Result<T> r) {
  if (!r.ok()) throw py::value_error(r.status().ToString());
  return std::move(r).value();
}

std::vector<int64_t> Tokens(py::handle tokens) {
  std::vector<int64_t> out;
  for (const auto& item : Items(tokens, "tokens")) {
    if (!PyLong_Check(item.ptr()) && !py::hasattr(item, "__index__")) {
      throw py::type_error("tokens must be ints");
    }
    out.push_back(py::int_(item).cast<int64_t>());
  }
  return out;
}

void BindConnector(py::module_& m) {
  using namespace connector;
  m.doc() = "The engine connector's logic (C++, include/tierkv/connector.h)";
  m.def(
      "chunk_hashes",
      [](py::object tokens, size_t chunk_size, const std::string& algorithm, bool hash_partial_last,
         std::optional<std::vector<py::bytes>> extra_keys) {
        ChunkHashOptions o;
        o.chunk_size = chunk_size;
        o.algorithm = Check(ParseHashAlgorithm(algorithm));
        o.hash_partial_last = hash_partial_last;
        std::vector<std::string> extra;
        if (extra_keys) {
          for (const auto& e : *extra_keys) extra.push_back(std::string(e));
        }
        const std::vector<int64_t> t = Tokens(tokens);
        std::vector<std::string> digests;
        {
          py::gil_scoped_release release;
          digests = Check(ChunkHashes(o, t, extra));
        }
        py::list out;
        for (const auto& d : digests) out.append(py::bytes(d));
        return out;
      },
      py::arg("tokens"), py::arg("chunk_size") = 256, py::arg("algorithm") = "sha256",
      py::arg("hash_partial_last") = false, py::arg("extra_keys") = py::none());

  py::class_<KeyMetadata>(m, "KeyMetadata")
      .def(py::init([](std::string model_name, int tp_rank, int pcp_rank, int dcp_rank, int pp_rank,
                       int group, std::string cache_prefix) {
             return KeyMetadata{std::move(cache_prefix),
                                std::move(model_name),
                                tp_rank,
                                pcp_rank,
                                dcp_rank,
                                pp_rank,
                                group};
           }),
           py::arg("model_name"), py::arg("tp_rank") = 0, py::arg("pcp_rank") = 0,
           py::arg("dcp_rank") = 0, py::arg("pp_rank") = 0, py::arg("group") = 0,
           py::arg("cache_prefix") = "")
      .def_readwrite("cache_prefix", &KeyMetadata::cache_prefix)
      .def_readwrite("model_name", &KeyMetadata::model_name)
      .def_readwrite("tp_rank", &KeyMetadata::tp_rank)
      .def_readwrite("pcp_rank", &KeyMetadata::pcp_rank)
      .def_readwrite("dcp_rank", &KeyMetadata::dcp_rank)
      .def_readwrite("pp_rank", &KeyMetadata::pp_rank)
      .def_readwrite("group", &KeyMetadata::group);
  m.def("model_name", &ModelName, py::arg("model_path"));
  m.def("key_prefix", &KeyPrefix, py::arg("metadata"));
  m.def("chunk_key", &ChunkKey, py::arg("metadata"), py::arg("chunk_hash_hex"));
  m.def("group_id", &GroupId, py::arg("cache_prefix"), py::arg("model_name"),
        py::arg("chunk_hash_hex"));

  py::enum_<AttentionKind>(m, "AttentionKind")
      .value("GQA", AttentionKind::kGqa)
      .value("MLA", AttentionKind::kMla)
      .value("RANK_SPECIFIC", AttentionKind::kRankSpecific);
  m.def(
      "tp_replication_factor",
      [](AttentionKind kind, int tp_size, int num_kv_heads, int dcp_size) {
        return Check(TpReplicationFactor(kind, tp_size, num_kv_heads, dcp_size));
      },
      py::arg("kind"), py::arg("tp_size"), py::arg("num_kv_heads") = 1, py::arg("dcp_size") = 1);
  m.def(
      "key_tp_rank", [](int tp_rank, int factor) { return Check(KeyTpRank(tp_rank, factor)); },
      py::arg("tp_rank"), py::arg("factor"));
  m.def(
      "lookup_namespaces",
      [](const KeyMetadata& base, int tp_size, int pcp_size, int pp_size, int factor,
         int dcp_size) {
        return Check(LookupNamespaces(base, tp_size, pcp_size, pp_size, factor, dcp_size));
      },
      py::arg("base"), py::arg("tp_size") = 1, py::arg("pcp_size") = 1, py::arg("pp_size") = 1,
      py::arg("factor") = 1, py::arg("dcp_size") = 1);

  py::class_<PutBatch>(m, "PutBatch")
      .def_readonly("keys", &PutBatch::keys)
      .def_readonly("all_buffer_ptrs", &PutBatch::ptrs)
      .def_readonly("all_sizes", &PutBatch::sizes)
      .def_readonly("group_ids", &PutBatch::group_ids)
      .def_readonly("indices", &PutBatch::indices);
  m.def(
      "filter_missing",
      [](py::object keys, py::object ptrs, py::object sizes, std::vector<int> exists,
         std::optional<std::vector<std::string>> group_ids) {
        PutBatch b;
        b.keys = Strings(keys, "keys");
        for (const auto& item : Items(ptrs, "all_buffer_ptrs"))
          b.ptrs.push_back(U64List(item, "all_buffer_ptrs[i]"));
        for (const auto& item : Items(sizes, "all_sizes"))
          b.sizes.push_back(U64List(item, "all_sizes[i]"));
        if (group_ids) b.group_ids = *group_ids;
        return Check(FilterMissing(b, exists));
      },
      py::arg("keys"), py::arg("all_buffer_ptrs"), py::arg("all_sizes"), py::arg("exists"),
      py::arg("group_ids") = py::none());

  py::class_<LookupResult>(m, "LookupResult")
      .def_readonly("hit_tokens", &LookupResult::hit_tokens)
      .def_readonly("hit_chunks", &LookupResult::hit_chunks)
      .def_readonly("keys_checked", &LookupResult::keys_checked);
  m.def(
      "longest_prefix_hit",
      [](py::object store, std::vector<std::string> hashes, std::vector<std::string> namespaces,
         uint64_t num_tokens, uint64_t chunk_size) {
        if (py::isinstance<Store>(store)) {
          Store& s = store.cast<Store&>();
          py::gil_scoped_release release;
          return Check(LongestPrefixHit(
              hashes, namespaces, num_tokens, chunk_size,
              [&s](const std::vector<std::string>& keys) { return s.BatchIsExist(keys); }));
        }
        // Any object with Mooncake's batch_is_exist (e.g. a MooncakeDistributedStore).
        py::object method = store.attr("batch_is_exist");
        return Check(LongestPrefixHit(hashes, namespaces, num_tokens, chunk_size,
                                      [&method](const std::vector<std::string>& keys) {
                                        return method(keys).cast<std::vector<int>>();
                                      }));
      },
      py::arg("store"), py::arg("chunk_hashes_hex"), py::arg("namespaces"), py::arg("num_tokens"),
      py::arg("chunk_size"));

  m.def("staging_need", &StagingNeed, py::arg("value_bytes"));
  py::class_<StreamedObject>(m, "StreamedObject")
      .def_readonly("index", &StreamedObject::index)
      .def_readonly("piece_bytes", &StreamedObject::piece_bytes)
      .def_readonly("pieces", &StreamedObject::pieces);
  py::class_<StagingPlan>(m, "StagingPlan")
      .def_readonly("parts", &StagingPlan::parts)
      .def_readonly("streamed", &StagingPlan::streamed)
      .def_readonly("usable_budget", &StagingPlan::usable_budget)
      .def_readonly("part_budget", &StagingPlan::part_budget);
  m.def(
      "plan_staged_load",
      [](py::object sizes, py::object capacity, double ratio, py::object part_budget) {
        return Check(PlanStagedLoad(U64List(sizes, "value_sizes"),
                                    U64(capacity, "staging_capacity"), ratio,
                                    U64(part_budget, "part_budget")));
      },
      py::arg("value_sizes"), py::arg("staging_capacity"), py::arg("usable_ratio") = 0.9,
      py::arg("part_budget") = 0);

  py::class_<ExtraConfig>(m, "ExtraConfig")
      .def_readonly("enable_group_semantics", &ExtraConfig::enable_group_semantics)
      .def_readonly("load_async", &ExtraConfig::load_async)
      .def_readonly("lookup_async", &ExtraConfig::lookup_async)
      .def_readonly("cache_prefix", &ExtraConfig::cache_prefix);
  m.def(
      "parse_extra_config",
      [](py::object config) {
        const std::string text =
            py::isinstance<py::str>(config)
                ? config.cast<std::string>()
                : py::module_::import("json").attr("dumps")(config).cast<std::string>();
        return Check(ParseExtraConfig(text));
      },
      py::arg("config"));
}

}  // namespace
}  // namespace tierkv

PYBIND11_MODULE(_tierkv, m) {
  m.doc() = "tierkv: a tiered KV-cache store (docs/python.md)";
  m.attr("__version__") = TIERKV_VERSION;
  m.def(
      "strerror",
      [](int code) {
        return std::string(tierkv::ErrorCodeName(static_cast<tierkv::ErrorCode>(code))) + " (" +
               std::to_string(code) + ")";
      },
      py::arg("code"));
  // Every public code, for tierkv.ErrorCode: the names ErrorCodeName knows.
  m.def("_error_codes", [] {
    std::vector<std::pair<std::string, int>> out;
    for (int code = 0; code >= -2000; --code) {
      const auto name = tierkv::ErrorCodeName(static_cast<tierkv::ErrorCode>(code));
      if (name != "UNKNOWN") out.emplace_back(std::string(name), code);
    }
    return out;
  });
  tierkv::BindStore(m);
  py::module_ connector = m.def_submodule("connector");
  tierkv::BindConnector(connector);
}
