// The Python module tierkv._tierkv (docs/python.md): a thin pybind11 binding of
// tierkv::DistributedStore and tierkv::connector. It converts types (ints or buffer-protocol
// objects or torch tensors to addresses, lists to vectors, results to Python objects), releases
// the GIL around every call into the store, and holds no logic of its own. The parts:
// conversions.cc, store_bindings.cc, tensor_bindings.cc, connector_bindings.cc.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "tierkv/status.h"

namespace py = pybind11;

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
  tierkv::binding::BindStore(m);
  py::module_ connector = m.def_submodule("connector");
  tierkv::binding::BindConnector(connector);
}
