// tierkv.connector: the engine connector's logic (chunk hashes, keys, put batches, lookups),
// written once in C++ (include/tierkv/connector.h) and bound here.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "conversions.h"
#include "tierkv/connector.h"

namespace tierkv::binding {
namespace {

using Store = DistributedStore;

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

}  // namespace

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

}  // namespace tierkv::binding
