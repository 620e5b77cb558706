"""The tiny engine over tierkv.connector.KVConnector, in one process (embedded stores):
bitwise-identical outputs with full and partial hits from DRAM and from the SSD tier, the
local prefix cache overflowing to tierkv, a corrupted block on disk recomputed, cache_prefix
isolation, saves that never block a step and pause on a full store, layer-wise loads,
asynchronous lookups and loads, roles and strict config."""

import os
import tempfile
import threading
import time

import pytest

import tierkv
from tierkv import connector as c
from engine_util import (BS, MAX_TOKENS, ModelConfig, embedded_store, engine, kv_config, prompt,
                         push_to_disk, same, scratch)

P = prompt(1, 100)            # 6 full blocks before its last token
Q = P[:50] + prompt(2, 40)    # shares 3 blocks with P


@pytest.mark.parametrize("load_async", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_full_and_partial_dram_hits_are_bitwise_identical(load_async, dtype):
    model = ModelConfig(dtype=dtype)
    ref_p, ref_q = scratch([P, Q], model=model)
    store = embedded_store()
    cfg = kv_config(load_async=load_async)
    e1 = engine(cfg, store, model=model)
    (r,) = e1.generate([P], MAX_TOKENS)
    assert r.external_hit_tokens == 0 and same(r, ref_p)
    e1.close()
    assert e1.worker.stats["saved_objects"] == 6 * model.n_layers
    e2 = engine(cfg, store, model=model)  # a fresh engine: empty local cache
    full, partial = e2.generate([P, Q], MAX_TOKENS)
    assert full.external_hit_tokens == 96 and partial.external_hit_tokens == 48
    assert same(full, ref_p) and same(partial, ref_q)
    (again,) = e2.generate([P], MAX_TOKENS)  # now a local prefix-cache hit
    assert again.local_hit_tokens == 96 and again.external_hit_tokens == 0
    assert same(again, ref_p)
    assert e2.worker.stats["loaded_blocks"] == 9
    assert e2.worker.stats["load_error_blocks"] == 0
    e2.close()
    store.close()


def test_local_cache_overflows_to_tierkv_and_comes_back():
    prompts = [prompt(10 + i, 100) for i in range(4)]
    refs = scratch(prompts)
    store = embedded_store()
    e = engine(kv_config(), store, num_blocks=16)  # 7 blocks per request: 2 fit at a time
    for p, ref in zip(prompts, refs):
        (r,) = e.generate([p], MAX_TOKENS)
        assert same(r, ref)
    (r,) = e.generate([prompts[0]], MAX_TOKENS)
    assert e.blocks.evictions > 0
    assert r.local_hit_tokens == 0 and r.external_hit_tokens == 96 and same(r, refs[0])
    e.close()
    store.close()


def _ssd_store(path):
    return embedded_store(
        "4MB", enable_ssd_offload=True, ssd_offload_path=path, offload_capacity="32MB",
        offload_region_size="1MB", staging_buffer_size="4MB",
        eviction_high_watermark_ratio=0.5, eviction_ratio=0.5, default_kv_lease_ttl_ms=200)


def test_ssd_hits_are_bitwise_identical_and_a_corrupted_block_is_recomputed():
    (ref,) = scratch([P])
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        store = _ssd_store(d)
        cfg = kv_config(enable_group_semantics=True)
        e1 = engine(cfg, store)
        (r1,) = e1.generate([P], MAX_TOKENS)
        e1.close()
        hashes = e1.worker.chunk_hashes_hex(P)[:6]
        keys = [e1.worker.key(layer, h) for h in hashes for layer in range(2)]
        push_to_disk(store, keys)
        e2 = engine(cfg, store)
        (r2,) = e2.generate([P], MAX_TOKENS)
        assert r2.external_hit_tokens == 96 and r2.load_error_blocks == 0 and same(r2, ref)
        e2.close()
        push_to_disk(store, keys)
        # Flip one byte of layer 0 of block 2 in the tier file (found by its bytes): what layer
        # 1 computes from it would be wrong too.
        value = e1.kv[0][r1.block_ids[2]].numpy().tobytes()
        (tier,) = [os.path.join(d, f) for f in os.listdir(d)]
        with open(tier, "r+b") as f:
            data = f.read()
            pos = data.find(value)
            assert pos >= 0 and data.find(value, pos + 1) < 0
            f.seek(pos + 100)
            f.write(bytes([data[pos + 100] ^ 0xFF]))
            f.flush()
            os.fsync(f.fileno())
        del data
        # A longer prompt: its step computes blocks 6..9 after the (failing) loaded prefix.
        p2 = P + prompt(3, 61)
        (ref2,) = scratch([p2])
        e3 = engine(cfg, store)
        (r3,) = e3.generate([p2], MAX_TOKENS)
        assert r3.external_hit_tokens == 96
        assert r3.load_error_blocks == 1  # detected by the record's checksum
        assert same(r3, ref2)             # blocks 2.. recomputed
        e3.close()
        # Nothing computed from the corrupted block was stored (that step's saves were
        # dropped), and the recomputed block replaced the corrupted object (upsert).
        e4 = engine(cfg, store)
        (r4,) = e4.generate([p2], MAX_TOKENS)
        assert r4.external_hit_tokens == 160 and r4.load_error_blocks == 0 and same(r4, ref2)
        e4.close()
        store.close()


def test_cache_prefix_deployments_are_isolated():
    (ref,) = scratch([P])
    store = embedded_store()
    a, b = kv_config(cache_prefix="deploy-a"), kv_config(cache_prefix="deploy-b")
    ea = engine(a, store)
    assert same(ea.generate([P], MAX_TOKENS)[0], ref)
    ea.close()
    assert all(k.startswith("deploy-a@") for k in
               [ea.worker.key(0, h) for h in ea.worker.chunk_hashes_hex(P)])
    eb = engine(b, store)
    (rb,) = eb.generate([P], MAX_TOKENS)
    assert rb.external_hit_tokens == 0 and same(rb, ref)  # b never sees a's blocks
    eb.close()
    ea2 = engine(a, store)
    (ra,) = ea2.generate([P], MAX_TOKENS)
    assert ra.external_hit_tokens == 96 and same(ra, ref)
    ea2.close()
    store.close()


class _GatedStore:
    """A store whose saves wait for a gate (the rest is the real store)."""

    def __init__(self, store):
        self._store = store
        self.gate = threading.Event()
        self.puts = 0

    def batch_put_from(self, *args):
        self.gate.wait()
        self.puts += 1
        return self._store.batch_put_from(*args)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_saves_never_block_a_step_and_blocks_wait_for_them():
    (ref,) = scratch([P])
    real = embedded_store()
    gated = _GatedStore(real)
    e = engine(kv_config(), gated)
    e.add_request(P, MAX_TOKENS)
    t0 = time.monotonic()
    while e.running or e.waiting:
        e.step()  # every step returns although no save can finish
    assert time.monotonic() - t0 < 30
    (r,) = e.finishing.values()
    assert same(r, ref) and gated.puts == 0
    for _ in range(3):
        e.step()
    assert r.request_id in e.finishing  # its blocks are kept while saves are in flight
    gated.gate.set()
    while e.finishing:
        e.step()
    assert gated.puts == 2 and e.worker.stats["saved_objects"] == 12
    assert e.blocks.num_available() == e.blocks.num_blocks
    e.close()
    real.close()


def test_a_full_store_pauses_saving_instead_of_failing():
    (ref,) = scratch([P])
    store = embedded_store("4MB", eviction_high_watermark_ratio=1.0)
    cfg = tierkv.ReplicateConfig()
    cfg.with_hard_pin = True  # never evicted: the segment stays full
    i = 0
    while store.put(f"pinned-{i}", b"x" * (256 << 10), cfg) == 0:
        i += 1
    e = engine(kv_config(), store)
    (r,) = e.generate([P], MAX_TOKENS)
    assert same(r, ref)
    e.close()
    st = e.worker.stats
    assert st["save_paused_requests"] == 1 and st["saved_objects"] == 0
    assert st["save_skipped_objects"] > 0 and st["save_errors"] == 0
    store.close()


def test_wait_for_layer_load_waits_for_its_layer_only():
    store = embedded_store()
    cfg = kv_config()
    e1 = engine(cfg, store)
    e1.generate([P], MAX_TOKENS)
    e1.close()
    e2 = engine(cfg, store)
    gate = threading.Event()
    e2.worker.before_layer_load = lambda layer: gate.wait() if layer == 1 else None
    r = e2.add_request(P, MAX_TOKENS)
    e2._admit()
    assert r.num_computed_tokens == 96
    from tiny_engine.engine import SchedulerOutput
    meta = e2.scheduler.build_connector_meta(SchedulerOutput([]))
    e2.worker.bind_connector_metadata(meta)
    e2.worker.start_load_kv()
    e2.worker.wait_for_layer_load(e2.layer_names[0])  # returns while layer 1 is held back
    assert not e2.worker._job.layer_done[1].is_set()
    gate.set()
    e2.worker.wait_for_layer_load(e2.layer_names[1])
    assert e2.worker.get_block_ids_with_load_errors() == set()
    e2.worker.clear_connector_metadata()
    e2.close()
    store.close()


class _Req:
    def __init__(self, rid, tokens, computed=0):
        self.request_id, self.prompt_token_ids, self.num_computed_tokens = rid, tokens, computed


def test_lookup_async_answers_none_until_the_lookup_is_done():
    store = embedded_store()
    cfg = kv_config()
    e1 = engine(cfg, store)
    e1.generate([P], MAX_TOKENS)
    e1.close()
    extra = dict(cfg["kv_connector_extra_config"], lookup_async=True)
    conn = c.KVConnector({"kv_role": "kv_both", "kv_connector_extra_config": extra},
                         c.KVConnectorRole.SCHEDULER, model=ModelConfig().name, num_layers=2,
                         block_size=BS, store=store, num_kv_heads=2)
    req = _Req("r1", P)
    assert conn.get_num_new_matched_tokens(req, 0) == (None, False)
    deadline = time.monotonic() + 10
    while (got := conn.get_num_new_matched_tokens(req, 0))[0] is None:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert got == (96, False)
    assert conn.get_num_new_matched_tokens(_Req("r2", P, 32), 32) == (None, False)
    conn.close()
    # The engine with lookup_async gets the same hit.
    (ref,) = scratch([P])
    e2 = engine({"kv_role": "kv_both", "kv_connector_extra_config": extra}, store)
    (r,) = e2.generate([P], MAX_TOKENS)
    assert r.external_hit_tokens == 96 and same(r, ref)
    e2.close()
    store.close()


def test_roles():
    (ref,) = scratch([P])
    store = embedded_store()
    prefix = "roles"
    prod = engine(kv_config("kv_producer", cache_prefix=prefix), store)
    assert same(prod.generate([P], MAX_TOKENS)[0], ref)
    prod.close()
    assert prod.worker.stats["saved_objects"] == 12
    prod2 = engine(kv_config("kv_producer", cache_prefix=prefix), store)
    (again,) = prod2.generate([P], MAX_TOKENS)
    assert again.external_hit_tokens == 0 and same(again, ref)  # a producer never loads
    assert prod2.scheduler.get_num_new_matched_tokens(_Req("x", P), 0) == (0, False)
    prod2.close()
    cons = engine(kv_config("kv_consumer", cache_prefix=prefix), store)
    (r,) = cons.generate([P], MAX_TOKENS)
    assert r.external_hit_tokens == 96 and same(r, ref)
    (other,) = cons.generate([Q], MAX_TOKENS)
    cons.close()
    assert cons.worker.stats["saved_objects"] == 0  # a consumer never stores
    assert store.batch_is_exist([cons.worker.key(0, h) for h in
                                 cons.worker.chunk_hashes_hex(Q)[3:5]]) == [0, 0]
    store.close()


@pytest.mark.parametrize("bad, message", [
    ({"kv_role": "kv_both", "nope": 1}, "unknown key"),
    ({"kv_role": "both"}, "kv_role"),
    ({"kv_connector": "MooncakeStoreConnector"}, "kv_connector"),
    ({"kv_connector_extra_config": {"load_async": "1"}}, "load_async"),
    ({"kv_connector_extra_config": {"lookup_async": "yes"}}, "lookup_async"),
    ({"kv_connector_extra_config": {"enable_group_semantics": 1}}, "enable_group_semantics"),
    ({"kv_connector_extra_config": {"chunk_size": "16"}}, "chunk_size"),
    ({"kv_connector_extra_config": {"chunk_size": 0}}, "chunk_size"),
    ({"kv_connector_extra_config": {"hash_algorithm": "md5"}}, "hash_algorithm"),
    ({"kv_connector_extra_config": {"typo_key": True}}, "unknown key"),
    ({"kv_connector_extra_config": {"cache_prefix": 3}}, "cache_prefix"),
])
def test_config_is_parsed_strictly(bad, message):
    with pytest.raises(ValueError, match=message):
        c.parse_config(bad)


def test_config_values_and_mismatched_sizes():
    conf = c.parse_config('{"kv_role": "kv_consumer", "kv_connector_extra_config": '
                          '{"load_async": "TRUE", "lookup_async": false, "chunk_size": 64, '
                          '"cache_prefix": "p", "enable_group_semantics": "true"}}')
    assert conf.kv_role == c.KVRole.CONSUMER and conf.load_async and not conf.lookup_async
    assert conf.chunk_size == 64 and conf.cache_prefix == "p" and conf.enable_group_semantics
    store = embedded_store("16MB")
    with pytest.raises(ValueError, match="chunk_size"):
        c.KVConnector(conf, c.KVConnectorRole.WORKER, model="m", num_layers=2, block_size=16,
                      store=store)
    with pytest.raises(ValueError, match="no store"):
        c.KVConnector(conf, c.KVConnectorRole.WORKER, model="m", num_layers=2, block_size=64)
    store.close()
