#include "trace.h"

#include <absl/container/flat_hash_map.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <tuple>
#include <utility>

namespace tierkv::bench {
namespace {

using Json = nlohmann::json;

Status LineError(std::string_view name, size_t line, const std::string& why) {
  return Status(ErrorCode::INVALID_PARAMS,
                std::string(name) + ":" + std::to_string(line) + ": " + why);
}

// A non-negative integer, or nothing.
bool AsCount(const Json& v, uint64_t* out) {
  if (v.is_number_unsigned()) {
    *out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    *out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

struct BlockId {
  uint64_t position;
  uint64_t hash_id;
  uint64_t tokens;
  bool operator==(const BlockId&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const BlockId& b) {
    return H::combine(std::move(h), b.position, b.hash_id, b.tokens);
  }
};

// Blocks held in the simulated cache, with their bytes.
class Holdings {
 public:
  Holdings(const Trace& trace, uint64_t bytes_per_token)
      : trace_(trace), bytes_per_token_(bytes_per_token), held_(trace.block_tokens.size(), 0) {}
  bool held(uint32_t b) const { return held_[b] != 0; }
  uint64_t bytes(uint32_t b) const { return trace_.block_tokens[b] * bytes_per_token_; }
  uint64_t used() const { return used_; }
  void Add(uint32_t b) {
    held_[b] = 1;
    used_ += bytes(b);
  }
  void Drop(uint32_t b) {
    held_[b] = 0;
    used_ -= bytes(b);
  }

 private:
  const Trace& trace_;
  const uint64_t bytes_per_token_;
  std::vector<uint8_t> held_;
  uint64_t used_ = 0;
};

// Counts the prefix hit of `r` against `h` into `out`.
void CountLookup(const Trace& trace, const TraceRequest& r, const Holdings& h,
                 CacheSimResult& out) {
  out.input_tokens += r.input_tokens;
  out.blocks += r.blocks.size();
  for (uint32_t b : r.blocks) {
    if (!h.held(b)) break;
    out.hit_tokens += trace.block_tokens[b];
    ++out.hit_blocks;
  }
}

}  // namespace

Result<Trace> ParseTrace(std::string_view text, std::string_view name, uint32_t block_tokens) {
  if (block_tokens == 0) return Status(ErrorCode::INVALID_PARAMS, "block_tokens must be > 0");
  Trace trace;
  absl::flat_hash_map<BlockId, uint32_t> ids;
  size_t line_number = 0;
  double last_timestamp = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_number;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const Json j = Json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return LineError(name, line_number, "not valid JSON");
    if (!j.is_object()) return LineError(name, line_number, "not a JSON object");
    auto field = [&](const char* key) -> const Json* {
      auto it = j.find(key);
      return it == j.end() ? nullptr : &*it;
    };
    TraceRequest r;
    const Json* ts = field("timestamp");
    if (ts == nullptr || !ts->is_number() || ts->get<double>() < 0) {
      return LineError(name, line_number, "\"timestamp\" must be a number >= 0 (milliseconds)");
    }
    r.timestamp_ms = ts->get<double>();
    if (r.timestamp_ms < last_timestamp) {
      return LineError(name, line_number,
                       "\"timestamp\" " + Json(r.timestamp_ms).dump() +
                           " is before the previous request's (" + Json(last_timestamp).dump() +
                           "): requests must be in arrival order");
    }
    last_timestamp = r.timestamp_ms;
    const Json* input = field("input_length");
    if (input == nullptr || !AsCount(*input, &r.input_tokens) || r.input_tokens == 0) {
      return LineError(name, line_number, "\"input_length\" must be an integer > 0");
    }
    if (const Json* output = field("output_length"); output != nullptr) {
      if (!AsCount(*output, &r.output_tokens)) {
        return LineError(name, line_number, "\"output_length\" must be an integer >= 0");
      }
    }
    const Json* hashes = field("hash_ids");
    if (hashes == nullptr || !hashes->is_array() || hashes->empty()) {
      return LineError(name, line_number, "\"hash_ids\" must be a non-empty array");
    }
    const uint64_t n = hashes->size();
    if (!(block_tokens * (n - 1) < r.input_tokens && r.input_tokens <= block_tokens * n)) {
      return LineError(name, line_number,
                       std::to_string(n) + " hash ids do not cover input_length " +
                           std::to_string(r.input_tokens) + " in blocks of " +
                           std::to_string(block_tokens) + " tokens");
    }
    r.blocks.reserve(n);
    uint32_t parent = kNoParent;
    for (uint64_t i = 0; i < n; ++i) {
      uint64_t hash_id = 0;
      if (!AsCount((*hashes)[i], &hash_id)) {
        return LineError(name, line_number,
                         "hash_ids[" + std::to_string(i) + "] is not an integer >= 0");
      }
      const uint64_t tokens = i + 1 < n ? block_tokens : r.input_tokens - block_tokens * (n - 1);
      auto [it, inserted] =
          ids.try_emplace(BlockId{i, hash_id, tokens}, static_cast<uint32_t>(ids.size()));
      if (inserted) {
        if (ids.size() >= kNoParent) {
          return LineError(name, line_number, "more than 2^32 - 1 distinct blocks");
        }
        trace.block_tokens.push_back(static_cast<uint32_t>(tokens));
        trace.block_parent.push_back(parent);
        trace.unique_tokens += tokens;
      }
      r.blocks.push_back(it->second);
      parent = it->second;
    }
    trace.block_references += n;
    trace.input_tokens += r.input_tokens;
    trace.requests.push_back(std::move(r));
  }
  if (trace.requests.empty()) {
    return Status(ErrorCode::INVALID_PARAMS, std::string(name) + ": the trace has no requests");
  }
  return trace;
}

Result<Trace> LoadTrace(const std::string& path, uint32_t block_tokens) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(ErrorCode::INVALID_PARAMS, "cannot open trace " + path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return Status(ErrorCode::INVALID_PARAMS, "cannot read trace " + path);
  return ParseTrace(text.str(), path, block_tokens);
}

CacheSimResult SimulateLru(const Trace& trace, uint64_t capacity_bytes, uint64_t bytes_per_token) {
  CacheSimResult out;
  Holdings h(trace, bytes_per_token);
  // An intrusive doubly linked list over block indices; `head` is the least recent.
  const uint32_t none = kNoParent;
  std::vector<uint32_t> prev(trace.block_tokens.size(), none), next(prev.size(), none);
  uint32_t head = none, tail = none;
  auto unlink = [&](uint32_t b) {
    (prev[b] == none ? head : next[prev[b]]) = next[b];
    (next[b] == none ? tail : prev[next[b]]) = prev[b];
    prev[b] = next[b] = none;
  };
  auto push_back = [&](uint32_t b) {
    prev[b] = tail;
    next[b] = none;
    (tail == none ? head : next[tail]) = b;
    tail = b;
  };
  for (const TraceRequest& r : trace.requests) {
    CountLookup(trace, r, h, out);
    for (uint32_t b : r.blocks) {
      if (h.held(b)) {
        unlink(b);
      } else {
        if (h.bytes(b) > capacity_bytes) continue;
        h.Add(b);
        ++out.inserted_blocks;
      }
      push_back(b);
    }
    while (h.used() > capacity_bytes) {
      const uint32_t victim = head;
      unlink(victim);
      h.Drop(victim);
      ++out.evicted_blocks;
    }
    out.peak_bytes = std::max(out.peak_bytes, h.used());
  }
  return out;
}

CacheSimResult SimulateBelady(const Trace& trace, uint64_t capacity_bytes,
                              uint64_t bytes_per_token) {
  constexpr uint32_t kNever = std::numeric_limits<uint32_t>::max();
  // next_use[k]: the next request naming the block of reference k (flattened order).
  std::vector<uint32_t> next_use(trace.block_references);
  {
    std::vector<uint32_t> upcoming(trace.block_tokens.size(), kNever);
    size_t k = trace.block_references;
    for (size_t ri = trace.requests.size(); ri-- > 0;) {
      const auto& blocks = trace.requests[ri].blocks;
      for (size_t i = blocks.size(); i-- > 0;) {
        next_use[--k] = upcoming[blocks[i]];
      }
      for (uint32_t b : blocks) upcoming[b] = static_cast<uint32_t>(ri);
    }
  }
  CacheSimResult out;
  Holdings h(trace, bytes_per_token);
  std::vector<uint32_t> held_next(trace.block_tokens.size(), kNever);
  // (next use, block): the top is the furthest; stale entries are skipped when popped.
  std::priority_queue<std::pair<uint32_t, uint32_t>> furthest;
  size_t k = 0;
  for (const TraceRequest& r : trace.requests) {
    CountLookup(trace, r, h, out);
    for (uint32_t b : r.blocks) {
      const uint32_t nu = next_use[k++];
      if (!h.held(b)) {
        if (h.bytes(b) > capacity_bytes) continue;
        h.Add(b);
        ++out.inserted_blocks;
      }
      held_next[b] = nu;
      furthest.emplace(nu, b);
    }
    while (h.used() > capacity_bytes) {
      const auto [nu, b] = furthest.top();
      furthest.pop();
      if (!h.held(b) || held_next[b] != nu) continue;
      h.Drop(b);
      ++out.evicted_blocks;
    }
    out.peak_bytes = std::max(out.peak_bytes, h.used());
  }
  return out;
}

}  // namespace tierkv::bench
