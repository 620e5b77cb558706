// tierkv::connector (include/tierkv/connector.h): hashes against independently computed
// digests, key and group-id formats, the put filter, the lookup, the staging split (property
// tests over random batches) and strict extra-config parsing.
#include "tierkv/connector.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <memory>
#include <random>
#include <set>

#include "ssd/staging_area.h"
#include "tierkv/client.h"

namespace tierkv::connector {
namespace {

std::string Unhex(std::string_view hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// Digests computed with Python's hashlib over the documented framing
// (prev || u32le(n) || i64le tokens || u32le(len(extra)) || extra).
constexpr const char* kSha0 = "dc0b4e4c240896360ba8f7d168f2b076565add1875dd1eb6751063abcbd4956b";
constexpr const char* kSha1 = "97452416ec18f5f00ae3ec070132098196a76744479f89e5ea990de3e5e46184";
constexpr const char* kSha2 = "e7b14e6931b88f27082e66013ff782b105a69af868ae7f5ecf268809133d555d";
constexpr const char* kShaExtra =
    "49d4328ba05b06292441f5fdc0a2ec379392702fe074ac20de70efb6e5e05c96";
constexpr const char* kShaWide = "ec722db6f91f4b0e0f00dceef8506cc2c15d0cf09b10f37dfb70519707f4e474";

TEST(ConnectorHash, Sha256MatchesTheDocumentedFraming) {
  const std::vector<int64_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  ChunkHashOptions options;
  options.chunk_size = 4;
  auto hashes = ChunkHashes(options, tokens);
  ASSERT_TRUE(hashes.ok()) << hashes.status().ToString();
  ASSERT_EQ(hashes->size(), 2u);  // the partial last chunk (9) is not hashed by default
  EXPECT_EQ(Hex((*hashes)[0]), kSha0);
  EXPECT_EQ(Hex((*hashes)[1]), kSha1);

  options.hash_partial_last = true;
  hashes = ChunkHashes(options, tokens);
  ASSERT_TRUE(hashes.ok());
  ASSERT_EQ(hashes->size(), 3u);
  EXPECT_EQ(Hex((*hashes)[2]), kSha2);

  options.hash_partial_last = false;
  auto extra = ChunkHashes(options, std::vector<int64_t>{1, 2, 3, 4}, {"lora-a"});
  ASSERT_TRUE(extra.ok());
  EXPECT_EQ(Hex((*extra)[0]), kShaExtra);
  // Negative and wide token ids are hashed as 64-bit values.
  options.chunk_size = 2;
  auto wide = ChunkHashes(options, std::vector<int64_t>{-1, int64_t{1} << 40});
  ASSERT_TRUE(wide.ok());
  EXPECT_EQ(Hex((*wide)[0]), kShaWide);
}

TEST(ConnectorHash, Xxh3_128UsesCanonicalBytesOfTheSameFraming) {
  ChunkHashOptions options;
  options.chunk_size = 4;
  options.algorithm = HashAlgorithm::kXxh3_128;
  auto hashes = ChunkHashes(options, std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8});
  ASSERT_TRUE(hashes.ok());
  ASSERT_EQ(hashes->size(), 2u);
  // Recompute chunk 1 by hand: prev digest, n, tokens, extra length.
  std::string input = (*hashes)[0];
  const uint32_t n = 4, zero = 0;
  input.append(reinterpret_cast<const char*>(&n), 4);  // x86-64 is little-endian
  for (int64_t t = 5; t <= 8; ++t) input.append(reinterpret_cast<const char*>(&t), 8);
  input.append(reinterpret_cast<const char*>(&zero), 4);
  XXH128_canonical_t canonical;
  XXH128_canonicalFromHash(&canonical, XXH3_128bits(input.data(), input.size()));
  EXPECT_EQ((*hashes)[1],
            std::string(reinterpret_cast<const char*>(canonical.digest), sizeof(canonical.digest)));
  EXPECT_EQ((*hashes)[0].size(), DigestSize(HashAlgorithm::kXxh3_128));
}

TEST(ConnectorHash, ChainsAndRejectsBadArguments) {
  ChunkHashOptions options;
  options.chunk_size = 2;
  auto a = ChunkHashes(options, std::vector<int64_t>{1, 2, 3, 4});
  auto b = ChunkHashes(options, std::vector<int64_t>{9, 2, 3, 4});
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE((*a)[1], (*b)[1]);  // chunk 1 depends on chunk 0 through the chain
  options.chunk_size = 0;
  EXPECT_EQ(ChunkHashes(options, std::vector<int64_t>{1}).code(), ErrorCode::INVALID_PARAMS);
  options.chunk_size = 2;
  EXPECT_EQ(ChunkHashes(options, std::vector<int64_t>{1, 2, 3, 4}, {"only-one"}).code(),
            ErrorCode::INVALID_PARAMS);
  EXPECT_TRUE(ChunkHashes(options, std::vector<int64_t>{}).ok());
  EXPECT_EQ(ParseHashAlgorithm("md5").code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(*ParseHashAlgorithm("xxh3_128"), HashAlgorithm::kXxh3_128);
  EXPECT_EQ(Hex(Unhex("00ff10")), "00ff10");
}

TEST(ConnectorKeys, VllmSchemaWithAndWithoutCachePrefix) {
  KeyMetadata m;
  m.model_name = ModelName("meta-llama/Llama-3.1-8B/");
  m.tp_rank = 1;
  m.pcp_rank = 2;
  m.dcp_rank = 3;
  m.pp_rank = 4;
  m.group = 5;
  EXPECT_EQ(m.model_name, "Llama-3.1-8B");
  EXPECT_EQ(ChunkKey(m, "abcd"), "Llama-3.1-8B@tp_rank:1@pcp2@dcp3@pp_rank:4@group:5@abcd");
  m.cache_prefix = "prod";
  EXPECT_EQ(ChunkKey(m, "abcd"), "prod@Llama-3.1-8B@tp_rank:1@pcp2@dcp3@pp_rank:4@group:5@abcd");
  EXPECT_EQ(GroupId("", "Llama-3.1-8B", "abcd"), "tierkv:Llama-3.1-8B@abcd");
  EXPECT_EQ(GroupId("prod", "Llama-3.1-8B", "abcd"), "tierkv:prod@Llama-3.1-8B@abcd");
  EXPECT_EQ(ModelName("plain"), "plain");
}

TEST(ConnectorKeys, TpReplicationRule) {
  EXPECT_EQ(*TpReplicationFactor(AttentionKind::kMla, 8, 1), 8);
  EXPECT_EQ(*TpReplicationFactor(AttentionKind::kGqa, 8, 2), 4);
  EXPECT_EQ(*TpReplicationFactor(AttentionKind::kGqa, 8, 8), 1);
  EXPECT_EQ(*TpReplicationFactor(AttentionKind::kGqa, 4, 16), 1);
  EXPECT_EQ(*TpReplicationFactor(AttentionKind::kRankSpecific, 8, 2), 1);
  EXPECT_EQ(*TpReplicationFactor(AttentionKind::kMla, 8, 1, /*dcp_size=*/2), 1);
  EXPECT_EQ(TpReplicationFactor(AttentionKind::kGqa, 8, 0).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(*KeyTpRank(5, 4), 1);
  EXPECT_EQ(*KeyTpRank(7, 8), 0);
  EXPECT_EQ(KeyTpRank(-1, 1).code(), ErrorCode::INVALID_PARAMS);

  KeyMetadata base;
  base.model_name = "m";
  auto ns = LookupNamespaces(base, /*tp=*/4, /*pcp=*/1, /*pp=*/2, /*factor=*/2);
  ASSERT_TRUE(ns.ok());
  EXPECT_EQ(*ns, (std::vector<std::string>{"m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0",
                                           "m@tp_rank:0@pcp0@dcp0@pp_rank:1@group:0",
                                           "m@tp_rank:1@pcp0@dcp0@pp_rank:0@group:0",
                                           "m@tp_rank:1@pcp0@dcp0@pp_rank:1@group:0"}));
  auto dcp = LookupNamespaces(base, 2, 1, 1, 1, /*dcp_size=*/2);
  ASSERT_TRUE(dcp.ok());
  EXPECT_EQ(*dcp, (std::vector<std::string>{"m@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0",
                                            "m@tp_rank:1@pcp0@dcp1@pp_rank:0@group:0"}));
  EXPECT_EQ(LookupNamespaces(base, 4, 1, 1, 3).code(), ErrorCode::INVALID_PARAMS);
}

TEST(ConnectorFilter, GroupIdsFollowTheKeysTheyBelongTo) {
  // The regression: the first key exists; every remaining key must keep its own group id.
  PutBatch batch;
  batch.keys = {"k0", "k1", "k2", "k3"};
  batch.ptrs = {{0x1000}, {0x2000, 0x2100}, {0x3000}, {0x4000}};
  batch.sizes = {{10}, {20, 21}, {30}, {40}};
  batch.group_ids = {"g0", "g1", "g2", "g3"};
  auto out = FilterMissing(batch, {1, 0, -704, 1});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->keys, (std::vector<std::string>{"k1", "k2"}));
  EXPECT_EQ(out->group_ids, (std::vector<std::string>{"g1", "g2"}));
  EXPECT_EQ(out->ptrs, (std::vector<std::vector<uintptr_t>>{{0x2000, 0x2100}, {0x3000}}));
  EXPECT_EQ(out->sizes, (std::vector<std::vector<uint64_t>>{{20, 21}, {30}}));
  EXPECT_EQ(out->indices, (std::vector<size_t>{1, 2}));
  batch.group_ids.clear();
  out = FilterMissing(batch, {0, 0, 0, 1});
  ASSERT_TRUE(out.ok());
  EXPECT_TRUE(out->group_ids.empty());
  EXPECT_EQ(out->keys.size(), 3u);
  EXPECT_EQ(FilterMissing(batch, {0, 0}).code(), ErrorCode::INVALID_PARAMS);
  batch.group_ids = {"only-one"};
  EXPECT_EQ(FilterMissing(batch, {0, 0, 0, 0}).code(), ErrorCode::INVALID_PARAMS);
}

TEST(ConnectorLookup, OneCallAndTheLongestRunInEveryNamespace) {
  const std::vector<std::string> hashes = {"h0", "h1", "h2", "h3"};
  const std::vector<std::string> ns = {"a", "b"};
  std::set<std::string> present = {"a@h0", "b@h0", "a@h1", "b@h1", "a@h2", "a@h3", "b@h3"};
  int calls = 0;
  size_t asked = 0;
  auto exists = [&](const std::vector<std::string>& keys) {
    ++calls;
    asked = keys.size();
    std::vector<int> out;
    for (const auto& k : keys) out.push_back(present.count(k) ? 1 : 0);
    return out;
  };
  auto r = LongestPrefixHit(hashes, ns, /*num_tokens=*/64, /*chunk_size=*/16, exists);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(asked, 8u);
  EXPECT_EQ(r->hit_chunks, 2u);  // h2 is missing in namespace b: the run stops there
  EXPECT_EQ(r->hit_tokens, 32u);

  present.insert("b@h2");
  r = LongestPrefixHit(hashes, ns, 64, 16, exists);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_chunks, 4u);
  EXPECT_EQ(r->hit_tokens, 63u);  // a full hit leaves the last token to the engine
  // 50 tokens: 4 chunks asked (the last partial), full hit -> 49.
  r = LongestPrefixHit(hashes, ns, 50, 16, exists);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_tokens, 49u);
  // Fewer tokens than hashes: only the chunks the tokens cover are asked.
  r = LongestPrefixHit(hashes, ns, 20, 16, exists);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(asked, 4u);
  EXPECT_EQ(r->hit_tokens, 19u);
  // An error answer counts as absent.
  present.erase("a@h0");
  r = LongestPrefixHit(hashes, ns, 64, 16, exists);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_tokens, 0u);

  calls = 0;
  r = LongestPrefixHit({}, ns, 64, 16, exists);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(calls, 0);
  EXPECT_EQ(LongestPrefixHit(hashes, {}, 64, 16, exists).code(), ErrorCode::INVALID_PARAMS);
  auto short_answer = [](const std::vector<std::string>&) { return std::vector<int>{1}; };
  EXPECT_EQ(LongestPrefixHit(hashes, ns, 64, 16, short_answer).code(), ErrorCode::INTERNAL_ERROR);
}

TEST(ConnectorLookup, AgainstAnEmbeddedClient) {
  Config config;
  config.global_segment_size = 16 << 20;
  config.use_huge_pages = false;
  auto client = Client::Create(config);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  std::string value(1000, 'x');
  for (const char* key : {"ns@h0", "ns@h1"}) {
    ASSERT_EQ((*client)->Put(key, value.data(), value.size()), 0);
  }
  auto r = LongestPrefixHit({"h0", "h1", "h2"}, {"ns"}, 48, 16, **client);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->hit_tokens, 32u);
}

// Property test of the staging split: random batches against the rule's invariants.
TEST(ConnectorStaging, PlanPropertiesOverRandomBatches) {
  std::mt19937_64 rng(20261201);
  for (int round = 0; round < 2000; ++round) {
    const uint64_t capacity = 4096 * (4 + rng() % 2000);
    const double ratio = 0.1 + 0.9 * static_cast<double>(rng() % 1000) / 1000.0;
    const size_t n = rng() % 40;
    std::vector<uint64_t> sizes(n);
    for (auto& s : sizes) {
      switch (rng() % 4) {
        case 0:
          s = rng() % 4096;
          break;
        case 1:
          s = rng() % (1 << 20);
          break;
        case 2:
          s = 4096 * (rng() % 512);
          break;
        default:
          s = rng() % (capacity * 2 + 1);
          break;
      }
    }
    const uint64_t usable = static_cast<uint64_t>(ratio * static_cast<double>(capacity));
    const uint64_t part_budget = rng() % 2 ? 0 : rng() % (usable + 1);
    auto plan = PlanStagedLoad(sizes, capacity, ratio, part_budget);
    bool needs_stream = false;
    for (uint64_t s : sizes) needs_stream |= StagingNeed(s) > usable;
    if (!plan.ok()) {
      // Only a budget too small to stream one piece may fail.
      ASSERT_EQ(plan.code(), ErrorCode::INVALID_PARAMS);
      ASSERT_TRUE(needs_stream && usable <= 8192 + 4096) << plan.status().ToString();
      continue;
    }
    const uint64_t budget = part_budget == 0 ? usable : part_budget;
    ASSERT_EQ(plan->usable_budget, usable);
    ASSERT_EQ(plan->part_budget, budget);
    std::vector<int> seen(n, 0);
    size_t last = 0;
    bool first = true;
    for (const auto& part : plan->parts) {
      ASSERT_FALSE(part.empty());
      uint64_t total = 0;
      for (size_t i : part) {
        ASSERT_LT(i, n);
        ++seen[i];
        if (!first) {
          ASSERT_GT(i, last);  // order kept across parts
        }
        last = i;
        first = false;
        ASSERT_LE(StagingNeed(sizes[i]), usable);
        total += StagingNeed(sizes[i]);
      }
      // Within the part budget, or a single object over it (but within usable).
      ASSERT_TRUE(total <= budget || part.size() == 1);
    }
    // Greedy: the first object of a part would not have fitted in the part before it.
    for (size_t p = 1; p < plan->parts.size(); ++p) {
      uint64_t prev = 0;
      for (size_t i : plan->parts[p - 1]) prev += StagingNeed(sizes[i]);
      ASSERT_GT(prev + StagingNeed(sizes[plan->parts[p][0]]), budget);
    }
    for (const auto& s : plan->streamed) {
      ASSERT_LT(s.index, n);
      ++seen[s.index];
      ASSERT_GT(StagingNeed(sizes[s.index]), usable);
      ASSERT_EQ(s.piece_bytes % 4096, 0u);
      ASSERT_LE(StagingNeed(s.piece_bytes), usable);
      ASSERT_GT(StagingNeed(s.piece_bytes + 4096), usable);  // the largest piece that fits
      ASSERT_GE(s.pieces * s.piece_bytes, sizes[s.index]);
      ASSERT_LT((s.pieces - 1) * s.piece_bytes, sizes[s.index]);
    }
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "object " << i;
  }
}

TEST(ConnectorStaging, RejectsBadBudgets) {
  EXPECT_EQ(PlanStagedLoad({1}, 1 << 20, 0.0).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(PlanStagedLoad({1}, 1 << 20, 1.5).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(PlanStagedLoad({1}, 1 << 20, 0.5, 1 << 20).code(), ErrorCode::INVALID_PARAMS);
  EXPECT_EQ(PlanStagedLoad({1 << 20}, 8192, 1.0).code(), ErrorCode::INVALID_PARAMS);
  auto plan = PlanStagedLoad({}, 0, 1.0);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->parts.empty());
  EXPECT_EQ(StagingNeed(1), 4096u + 8192u);
  EXPECT_EQ(StagingNeed(4096), 4096u + 8192u);
}

TEST(ConnectorExtraConfig, StrictBooleans) {
  auto c = ParseExtraConfig("{}");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->enable_group_semantics);
  EXPECT_TRUE(c->load_async);
  EXPECT_FALSE(c->lookup_async);
  c = ParseExtraConfig(
      R"({"enable_group_semantics": true, "load_async": "FALSE", "lookup_async": "True",
          "cache_prefix": "p", "other_engine_key": 5})");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->enable_group_semantics);
  EXPECT_FALSE(c->load_async);
  EXPECT_TRUE(c->lookup_async);
  EXPECT_EQ(c->cache_prefix, "p");
  for (const char* bad :
       {R"({"load_async": "0"})", R"({"load_async": ""})", R"({"load_async": 1})",
        R"({"lookup_async": "yes"})", R"({"enable_group_semantics": null})",
        R"({"load_async": " true"})", R"({"cache_prefix": 3})", "[]", "not json"}) {
    auto r = ParseExtraConfig(bad);
    EXPECT_EQ(r.code(), ErrorCode::INVALID_CONFIG) << bad;
  }
  EXPECT_NE(ParseExtraConfig(R"({"load_async": "0"})").status().message().find("load_async"),
            std::string::npos);
}

}  // namespace
}  // namespace tierkv::connector
