// The store's tensor methods (put_tensor, get_tensor, their batch, tp and into variants):
// torch tensors in and out, with Mooncake's tensor header (docs/python.md).
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "conversions.h"

namespace tierkv::binding {

void BindStoreTensors(StoreClass& store) {
  using Store = DistributedStore;
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
            py::list out;
            if (p.size() != k.size() || n.size() != k.size()) {
              // Mooncake: lists of different lengths fail every key with INVALID_PARAMS (an int,
              // where a key that fails on its own gives None).
              for (size_t i = 0; i < k.size(); ++i) out.append(ToInt(ErrorCode::INVALID_PARAMS));
              return out;
            }
            auto infos = Release<Result<TensorInfo>>([&] { return s.BatchGetTensorInto(k, p, n); });
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
          "upsert_tensor_from",
          [](Store& s, const std::string& key, py::object buffer, py::object size) {
            Buffers b;
            const uint64_t n = U64(size, "size");
            const uintptr_t ptr = b.Sized(buffer, n, false, "buffer_ptr");
            py::gil_scoped_release release;
            return s.UpsertTensorFrom(key, ptr, n);
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

}  // namespace tierkv::binding
