// Conversions between Python objects and tierkv's C++ types, shared by the binding files of
// the module tierkv._tierkv (docs/python.md). Each raises a Python TypeError or ValueError that
// names the argument; none releases the GIL (the callers do, around calls into the store).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tierkv/distributed_store.h"
#include "tierkv/status.h"

namespace tierkv::binding {

namespace py = pybind11;

// A non-negative integer argument; a clear ValueError otherwise (pybind's own unsigned caster
// reports a negative value as an unmatched overload).
uint64_t U64(py::handle h, const char* what);

// Whether `h` is a torch.Tensor (checked by type name: torch is imported only when used).
bool IsTorchTensor(py::handle h);

// A buffer argument: an int address (as engines pass tensor.data_ptr()), a torch tensor on the
// CPU, or a C-contiguous object supporting the buffer protocol (numpy arrays, bytearray,
// memoryview). `extent` is known for objects; the Python object is kept while the call runs.
struct Mem {
  uintptr_t ptr = 0;
  std::optional<uint64_t> extent;
};

class Buffers {
 public:
  Mem Get(py::handle h, bool writable, const std::string& what);
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

// A list (or tuple, or other sequence) of str; a TypeError naming the first bad item.
std::vector<std::string> Strings(py::handle list, const char* what);

// batch_is_exist's keys as views of the str objects' UTF-8 bytes, no copy: the engines' most
// frequent metadata call. `holder` is a tuple of the keys: it keeps every str alive while the
// GIL is released, even if another thread changes the caller's list. The views' vector is
// kept per thread (no allocation per call) and used only until the call returns.
struct KeyViews {
  py::object holder;
  const std::vector<std::string_view>* views;
};
KeyViews ReusedKeyViews(py::handle list, const char* what);

// The items of a list (or other sequence, not a str or bytes).
std::vector<py::object> Items(py::handle list, const std::string& what);

// A list of non-negative ints.
std::vector<uint64_t> U64List(py::handle list, const std::string& what);

// A list of buffer arguments, each checked against its size in `sizes` when given.
std::vector<uintptr_t> PtrList(Buffers& buffers, py::handle list,
                               const std::vector<uint64_t>* sizes, bool writable,
                               const std::string& what);

using PtrLists = std::vector<std::vector<uintptr_t>>;
using SizeLists = std::vector<std::vector<uint64_t>>;

// all_buffer_ptrs / all_sizes (one list per key), each pointer checked against its size.
void NestedLists(Buffers& buffers, py::handle ptrs, py::handle sizes, bool writable,
                 PtrLists& out_ptrs, SizeLists& out_sizes);

// A read-only span over a bytes-like value (bytes, bytearray, memoryview, numpy, ...).
std::span<const uint8_t> Bytes(Buffers& buffers, py::handle h, const std::string& what);

// A ReplicateConfig argument; None is the default config.
StoreReplicateConfig ConfigOf(const py::object& config);

// A bytes object filled without the GIL (the copy of a large object does not stall others).
py::bytes ToBytes(const BufferHandle& h);

// The Python side of a BufferHandle (buffer protocol, ptr(), size(), len()).
struct PyBufferHandle {
  std::shared_ptr<const BufferHandle> handle;
};

// A BufferHandle, or None for a failed get.
py::object MaybeHandle(Result<std::shared_ptr<const BufferHandle>>& r);

// A CPU tensor as a TensorView (made contiguous first: `keep` holds the copy).
TensorView ViewOf(py::handle tensor, std::vector<py::object>& keep, const std::string& what);

// A new tensor holding a stored tensor's payload, or None.
py::object ToTensor(Result<StoredTensor>& t);

// A tensor viewing [ptr, ptr + payload) in the caller's buffer (Mooncake's get_tensor_into).
py::object TensorAt(uintptr_t ptr, const TensorInfo& info);

// Runs `call` without the GIL.
template <typename T>
std::vector<T> Release(const std::function<std::vector<T>()>& call) {
  py::gil_scoped_release release;
  return call();
}

}  // namespace tierkv::binding
