#include "conversions.h"

#include <cstring>
#include <string_view>

namespace tierkv::binding {

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

Mem Buffers::Get(py::handle h, bool writable, const std::string& what) {
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

namespace {

// A list or tuple is read through PySequence_Fast's item array (no new reference per item);
// other sequences are copied into a list first.
py::object FastSequence(py::handle list, const std::string& what) {
  if (!PySequence_Check(list.ptr()) || PyUnicode_Check(list.ptr()) || PyBytes_Check(list.ptr())) {
    throw py::type_error(what + " must be a list");
  }
  PyObject* fast = PySequence_Fast(list.ptr(), "not a sequence");
  if (fast == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(fast);
}

// A list of str, read as FastSequence.
py::object StrSequence(py::handle list, const char* what) {
  if (PyUnicode_Check(list.ptr()) || !PySequence_Check(list.ptr())) {
    throw py::type_error(std::string(what) + " must be a list of str");
  }
  return FastSequence(list, what);
}

// Item i of such a list: its UTF-8 bytes (cached by the str object), or a TypeError.
std::string_view StrItem(PyObject* item, const char* what, Py_ssize_t i) {
  Py_ssize_t len = 0;
  const char* s = PyUnicode_Check(item) ? PyUnicode_AsUTF8AndSize(item, &len) : nullptr;
  if (s == nullptr) {
    PyErr_Clear();
    throw py::type_error(std::string(what) + "[" + std::to_string(i) + "] must be a str");
  }
  return {s, static_cast<size_t>(len)};
}

}  // namespace

std::vector<std::string> Strings(py::handle list, const char* what) {
  const py::object fast = StrSequence(list, what);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    out.emplace_back(StrItem(items[i], what, i));
  }
  return out;
}

// The str objects are held by a tuple (a list could be changed by another thread while the
// GIL is released), and their UTF-8 bytes are read in place. Each str's header and bytes are
// fetched a few items ahead: with ~100-byte keys these misses were most of the binding's time.
KeyViews ReusedKeyViews(py::handle list, const char* what) {
  thread_local std::vector<std::string_view> views;
  const py::object fast = StrSequence(list, what);
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(fast.ptr());
  PyObject** items = PySequence_Fast_ITEMS(fast.ptr());
  auto prefetch = [&](Py_ssize_t i) {
    if (i >= n) return;
    const char* item = reinterpret_cast<const char*>(items[i]);
    for (int off = 0; off < 192; off += 64) __builtin_prefetch(item + off);
  };
  // A tuple is immutable and holds its items; a list's items are held by a new tuple.
  const bool copy = !PyTuple_Check(fast.ptr());
  py::object holder = fast;
  if (copy) {
    PyObject* tuple = PyTuple_New(n);
    if (tuple == nullptr) throw py::error_already_set();
    holder = py::reinterpret_steal<py::object>(tuple);
  }
  views.resize(static_cast<size_t>(n));
  constexpr Py_ssize_t kAhead = 16;
  for (Py_ssize_t i = 0; i < kAhead; ++i) prefetch(i);
  for (Py_ssize_t i = 0; i < n; ++i) {
    prefetch(i + kAhead);
    if (copy) {
      Py_INCREF(items[i]);
      PyTuple_SET_ITEM(holder.ptr(), i, items[i]);
    }
    views[static_cast<size_t>(i)] = StrItem(items[i], what, i);
  }
  return KeyViews{std::move(holder), &views};
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

py::object MaybeHandle(Result<std::shared_ptr<const BufferHandle>>& r) {
  if (!r.ok()) return py::none();
  return py::cast(PyBufferHandle{std::move(*r)});
}

// ---- torch ---------------------------------------------------------------------------------

namespace {

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

}  // namespace

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

namespace {

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

}  // namespace

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

}  // namespace tierkv::binding
