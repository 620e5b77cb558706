"""tierkv.connector: hashes and keys are the same in every process (no PYTHONHASHSEED), key
and group-id formats, the filtered-group-ids regression, the lookup across namespaces, the
staging split and strict booleans."""

import hashlib
import json
import os
import struct
import subprocess
import sys

import pytest

import tierkv
from tierkv import connector as c

TOKENS = list(range(1000, 1000 + 40))


def framed(prev, tokens, extra=b""):
    return (prev + struct.pack("<I", len(tokens)) + b"".join(struct.pack("<q", t) for t in tokens)
            + struct.pack("<I", len(extra)) + extra)


def test_sha256_chain_matches_the_documented_framing():
    hashes = c.chunk_hashes(TOKENS, chunk_size=16)
    assert len(hashes) == 2  # the partial last chunk (8 tokens) is not hashed by default
    h0 = hashlib.sha256(framed(b"", TOKENS[:16])).digest()
    h1 = hashlib.sha256(framed(h0, TOKENS[16:32])).digest()
    assert hashes == [h0, h1]
    partial = c.chunk_hashes(TOKENS, chunk_size=16, hash_partial_last=True)
    assert partial[2] == hashlib.sha256(framed(h1, TOKENS[32:])).digest()
    extra = c.chunk_hashes(TOKENS[:16], chunk_size=16, extra_keys=[b"lora-7"])
    assert extra[0] == hashlib.sha256(framed(b"", TOKENS[:16], b"lora-7")).digest()
    x = c.chunk_hashes(TOKENS, chunk_size=16, algorithm="xxh3_128")
    assert len(x) == 2 and all(len(d) == 16 for d in x) and x[0] != h0[:16]
    with pytest.raises(ValueError):
        c.chunk_hashes(TOKENS, chunk_size=0)
    with pytest.raises(ValueError):
        c.chunk_hashes(TOKENS, algorithm="md5")
    with pytest.raises(ValueError):
        c.chunk_hashes(TOKENS, chunk_size=16, extra_keys=[b"one"])


SCRIPT = r"""
import json, sys
from tierkv import connector as c
md = c.KeyMetadata("Llama-3.1-8B", tp_rank=1, pp_rank=2, cache_prefix="p")
hs = c.chunk_hashes(list(range(1000, 1040)), chunk_size=16, hash_partial_last=True)
hx = c.chunk_hashes(list(range(1000, 1040)), chunk_size=16, algorithm="xxh3_128")
print(json.dumps([[h.hex() for h in hs], [h.hex() for h in hx],
                  [c.chunk_key(md, h.hex()) for h in hs], hash("salted")]))
"""


def test_hashes_and_keys_agree_across_processes_with_different_hash_seeds():
    outs = []
    for seed in ("1", "2"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                           text=True, check=True)
        outs.append(json.loads(r.stdout))
    assert outs[0][3] != outs[1][3]  # the seeds did change Python's own hash()
    assert outs[0][:3] == outs[1][:3]
    md = c.KeyMetadata("Llama-3.1-8B", tp_rank=1, pp_rank=2, cache_prefix="p")
    here = c.chunk_hashes(TOKENS, chunk_size=16, hash_partial_last=True)
    assert outs[0][0] == [h.hex() for h in here]
    assert outs[0][2] == [c.chunk_key(md, h.hex()) for h in here]


def test_key_and_group_id_formats():
    md = c.KeyMetadata(c.model_name("meta-llama/Llama-3.1-8B/"), tp_rank=3, pcp_rank=1,
                       dcp_rank=2, pp_rank=4, group=5)
    assert c.chunk_key(md, "ab12") == "Llama-3.1-8B@tp_rank:3@pcp1@dcp2@pp_rank:4@group:5@ab12"
    assert c.key_prefix(md) == "Llama-3.1-8B@tp_rank:3@pcp1@dcp2@pp_rank:4@group:5"
    md.cache_prefix = "tenant-a"
    assert c.chunk_key(md, "ab12") == \
        "tenant-a@Llama-3.1-8B@tp_rank:3@pcp1@dcp2@pp_rank:4@group:5@ab12"
    md.cache_prefix = ""
    assert c.chunk_key(md, "ab12").startswith("Llama-3.1-8B@")  # byte-identical unprefixed
    gid = c.group_id("", "Llama-3.1-8B", "ab12")
    assert gid == "tierkv:Llama-3.1-8B@ab12"
    assert c.group_id("tenant-a", "Llama-3.1-8B", "ab12") == "tierkv:tenant-a@Llama-3.1-8B@ab12"
    for rank_part in ("tp_rank", "pcp", "dcp", "pp_rank", "group:"):
        assert rank_part not in gid
    # vLLM's replication rule for the key's tp_rank.
    assert c.tp_replication_factor(c.AttentionKind.MLA, 8) == 8
    assert c.tp_replication_factor(c.AttentionKind.GQA, 8, num_kv_heads=2) == 4
    assert c.tp_replication_factor(c.AttentionKind.GQA, 4, num_kv_heads=8) == 1
    assert c.key_tp_rank(7, 4) == 1
    with pytest.raises(ValueError):
        c.tp_replication_factor(c.AttentionKind.GQA, 0)


def test_filter_missing_keeps_each_keys_group_id():
    keys = ["k0", "k1", "k2", "k3"]
    ptrs = [[0x1000], [0x2000, 0x2800], [0x3000], [0x4000]]
    sizes = [[16], [8, 8], [16], [16]]
    groups = ["g0", "g1", "g2", "g3"]
    # The regression: the first key exists; the rest keep their own group ids.
    out = c.filter_missing(keys, ptrs, sizes, [1, 0, 0, 0], groups)
    assert out.keys == ["k1", "k2", "k3"]
    assert out.group_ids == ["g1", "g2", "g3"]
    assert out.all_buffer_ptrs == ptrs[1:] and out.all_sizes == sizes[1:]
    assert out.indices == [1, 2, 3]
    out = c.filter_missing(keys, ptrs, sizes, [0, 1, -704, 1], groups)
    assert out.keys == ["k0", "k2"] and out.group_ids == ["g0", "g2"]
    with pytest.raises(ValueError):
        c.filter_missing(keys, ptrs, sizes, [0, 0], groups)


class CountingStore:
    """Mooncake's batch_is_exist on a dict, counting calls."""

    def __init__(self, present):
        self.present, self.calls = present, []

    def batch_is_exist(self, keys):
        self.calls.append(list(keys))
        return [1 if k in self.present else 0 for k in keys]


def test_lookup_across_namespaces_in_one_call(embedded):
    base = c.KeyMetadata("m")
    ns = c.lookup_namespaces(base, tp_size=4, pp_size=1, factor=2)  # two shards of KV
    assert len(ns) == 2
    hashes = [h.hex() for h in c.chunk_hashes(list(range(64)), chunk_size=16)]
    present = {f"{n}@{h}" for n in ns for h in hashes[:3]} - {f"{ns[1]}@{hashes[2]}"}
    fake = CountingStore(present)
    r = c.longest_prefix_hit(fake, hashes, ns, num_tokens=64, chunk_size=16)
    assert len(fake.calls) == 1 and len(fake.calls[0]) == 8
    assert (r.hit_chunks, r.hit_tokens, r.keys_checked) == (2, 32, 8)
    # The same against a real store: one batch_is_exist of the same keys.
    for k in present:
        assert embedded.put(k, b"kv") == 0
    assert c.longest_prefix_hit(embedded, hashes, ns, 64, 16).hit_tokens == 32
    for h in hashes[2:]:
        for n in ns:
            embedded.put(f"{n}@{h}", b"kv")
    full = c.longest_prefix_hit(embedded, hashes, ns, 64, 16)
    assert (full.hit_chunks, full.hit_tokens) == (4, 63)  # a full hit leaves the last token


def test_staging_plan():
    plan = c.plan_staged_load([1 << 20] * 5 + [64 << 20], staging_capacity=4 << 20,
                              usable_ratio=1.0)
    assert plan.usable_budget == 4 << 20
    assert [len(p) for p in plan.parts] == [3, 2]  # 3 x (1 MiB + 8 KiB) fit in 4 MiB
    assert len(plan.streamed) == 1 and plan.streamed[0].index == 5
    assert plan.streamed[0].piece_bytes == (4 << 20) - 8192
    assert c.staging_need(1) == 4096 + 8192
    with pytest.raises(ValueError):
        c.plan_staged_load([1], 1 << 20, usable_ratio=0)


def test_strict_booleans():
    cfg = c.parse_extra_config({"load_async": "FALSE", "lookup_async": "True",
                                "enable_group_semantics": True, "cache_prefix": "p",
                                "unrelated": 1})
    assert (cfg.load_async, cfg.lookup_async, cfg.enable_group_semantics, cfg.cache_prefix) == \
        (False, True, True, "p")
    assert c.parse_extra_config({}).load_async is True
    assert c.parse_extra_config('{"lookup_async": false}').lookup_async is False
    for bad in ("0", "", "1", "yes", 1, 0, None):
        with pytest.raises(ValueError, match="load_async"):
            c.parse_extra_config({"load_async": bad})
