// The binding files of the module tierkv._tierkv (docs/python.md): each adds its part of the
// module; module.cc calls them in order.
#pragma once

#include <pybind11/pybind11.h>

#include <memory>

#include "tierkv/distributed_store.h"

namespace tierkv::binding {

namespace py = pybind11;

using StoreClass = py::class_<DistributedStore, std::shared_ptr<DistributedStore>>;

// tierkv.DistributedStore and its types (store_bindings.cc); calls BindStoreTensors.
void BindStore(py::module_& m);
// The store's tensor methods (tensor_bindings.cc).
void BindStoreTensors(StoreClass& store);
// tierkv.connector (connector_bindings.cc).
void BindConnector(py::module_& m);

}  // namespace tierkv::binding
