// Strict parsing of the connector's kv_connector_extra_config (include/tierkv/connector.h).
#include <nlohmann/json.hpp>
#include <string>

#include "tierkv/connector.h"

namespace tierkv::connector {
namespace {

bool EqualsNoCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto lower = [](char c) {
      return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
    };
    if (lower(a[i]) != lower(b[i])) return false;
  }
  return true;
}

Status ReadBool(const nlohmann::json& doc, const char* key, bool* out) {
  auto it = doc.find(key);
  if (it == doc.end()) return Status::Ok();
  if (it->is_boolean()) {
    *out = it->get<bool>();
    return Status::Ok();
  }
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    if (EqualsNoCase(s, "true")) {
      *out = true;
      return Status::Ok();
    }
    if (EqualsNoCase(s, "false")) {
      *out = false;
      return Status::Ok();
    }
  }
  return Status(ErrorCode::INVALID_CONFIG,
                std::string("kv_connector_extra_config key '") + key +
                    "' must be true, false, \"true\" or \"false\" (any case), got " + it->dump());
}

}  // namespace

Result<ExtraConfig> ParseExtraConfig(std::string_view json_text) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return Status(ErrorCode::INVALID_CONFIG, "kv_connector_extra_config must be a JSON object");
  }
  ExtraConfig config;
  for (auto [key, field] : {std::pair{"enable_group_semantics", &config.enable_group_semantics},
                            std::pair{"load_async", &config.load_async},
                            std::pair{"lookup_async", &config.lookup_async}}) {
    if (Status st = ReadBool(doc, key, field); !st.ok()) return st;
  }
  if (auto it = doc.find("cache_prefix"); it != doc.end()) {
    if (!it->is_string()) {
      return Status(
          ErrorCode::INVALID_CONFIG,
          "kv_connector_extra_config key 'cache_prefix' must be a string, got " + it->dump());
    }
    config.cache_prefix = it->get<std::string>();
  }
  return config;
}

}  // namespace tierkv::connector
