"""The tiny engine through tierkv's vLLM integration (tierkv.integrations.vllm), loaded the way
vLLM's factory loads it and driven with vLLM-shaped scheduler outputs (examples/tiny_engine/
vllm_shapes.py): bitwise-identical tokens and logits on full and partial hits from DRAM and
the SSD tier, cross-layer objects, a load error recomputed, producer/consumer roles, and the
layout fingerprint keeping engines of another dtype, block size or layout apart."""

import tempfile
import threading
import time
import uuid

import pytest

from engine_util import (BS, MAX_TOKENS, STORE_CONF, HeldStore, ModelConfig, prompt,
                         push_to_disk, same, scratch, vllm_kv_config)
from tiny_engine import Engine

P = prompt(1, 100)            # 6 full blocks before its last token
Q = P[:50] + prompt(2, 40)    # shares 3 blocks with P


def engine(cfg, num_blocks=64, model=None, block_size=BS):
    return Engine(model or ModelConfig(), num_blocks=num_blocks, block_size=block_size,
                  kv_transfer_config=cfg, threads=1)


@pytest.mark.parametrize("load_async", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_full_and_partial_dram_hits_are_bitwise_identical(load_async, dtype):
    model = ModelConfig(dtype=dtype)
    ref_p, ref_q = scratch([P, Q], model=model)
    with HeldStore():
        cfg = vllm_kv_config(load_async=load_async)
        e1 = engine(cfg, model=model)
        (r,) = e1.generate([P], MAX_TOKENS)
        e1.close()
        assert r.external_hit_tokens == 0 and same(r, ref_p)
        assert e1.connector_stats()["saved_objects"] == 6 * model.n_layers
        e2 = engine(cfg, model=model)
        full, partial = e2.generate([P, Q], MAX_TOKENS)
        assert full.external_hit_tokens == 96 and partial.external_hit_tokens == 48
        assert same(full, ref_p) and same(partial, ref_q)
        st = e2.connector_stats()
        assert st["loaded_blocks"] == 9 and st["load_error_blocks"] == 0
        e2.close()


def test_cross_layer_objects_one_per_block():
    (ref,) = scratch([P])
    with HeldStore() as store:
        cfg = vllm_kv_config(enable_cross_layers_blocks=True)
        e1 = engine(cfg)
        (r1,) = e1.generate([P], MAX_TOKENS)
        e1.close()
        assert e1.connector_stats()["saved_objects"] == 6  # not 6 x 2 layers
        keys = [e1.worker.keys.cross_key(0, h) for h in r1.hashes[:6]]
        assert store.batch_is_exist(keys) == [1] * 6
        assert [len(store.get(k)) for k in keys] == [2 * 4096] * 6  # both layers' block
        e2 = engine(cfg)
        (r,) = e2.generate([P], MAX_TOKENS)
        e2.close()
        assert r.external_hit_tokens == 96 and same(r, ref)
        # Per-layer objects of the same prompt are other keys: no hit across the two modes.
        e3 = engine(dict(cfg, kv_connector_extra_config=dict(
            cfg["kv_connector_extra_config"], enable_cross_layers_blocks=False)))
        (r3,) = e3.generate([P], MAX_TOKENS)
        e3.close()
        assert r3.external_hit_tokens == 0 and same(r3, ref)


def _ssd_conf(path):
    return dict(STORE_CONF, global_segment_size="4MB", enable_ssd_offload=True,
                ssd_offload_path=path, offload_capacity="32MB", offload_region_size="1MB",
                staging_buffer_size="4MB", eviction_high_watermark_ratio=0.5,
                eviction_ratio=0.5, default_kv_lease_ttl_ms=200)


def _layer_keys(e, tokens, nblocks):
    hashes = [h for h in e.add_request(tokens, 1).hashes[:nblocks]]
    e.waiting.clear()
    return [e.worker.keys.layer_key(0, layer, h) for h in hashes for layer in range(2)]


def test_full_and_partial_ssd_hits_are_bitwise_identical():
    (ref,) = scratch([P])
    with tempfile.TemporaryDirectory(dir="/tmp") as d:
        conf = _ssd_conf(d)
        with HeldStore(conf) as store:
            cfg = vllm_kv_config(store=conf, enable_group_semantics=True)
            e1 = engine(cfg)
            e1.generate([P], MAX_TOKENS)
            e1.close()
            keys = _layer_keys(e1, P, 6)
            push_to_disk(store, keys)
            e2 = engine(cfg)
            (r2,) = e2.generate([P], MAX_TOKENS)
            e2.close()
            assert r2.external_hit_tokens == 96 and r2.load_error_blocks == 0
            assert same(r2, ref)
            push_to_disk(store, keys)
            (ref_q,) = scratch([Q])
            e3 = engine(cfg)  # a partial hit, from disk only
            (r3,) = e3.generate([Q], MAX_TOKENS)
            e3.close()
            assert r3.external_hit_tokens == 48 and r3.load_error_blocks == 0
            assert same(r3, ref_q)


class _FailingGets:
    """The worker's store, with the gets of some keys failing (a store lost mid-load)."""

    def __init__(self, store, fail):
        self._store, self.fail = store, set(fail)

    def batch_get_into(self, keys, ptrs, sizes):
        got = self._store.batch_get_into(keys, ptrs, sizes)
        return [-800 if k in self.fail else g for k, g in zip(keys, got)]

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_a_load_error_is_recomputed_bitwise():
    (ref,) = scratch([P])
    with HeldStore():
        cfg = vllm_kv_config()
        e1 = engine(cfg)
        e1.generate([P], MAX_TOKENS)
        e1.close()
        e2 = engine(cfg)
        bad = _layer_keys(e2, P, 6)[5]  # layer 1 of block 2
        e2.worker.worker.store = _FailingGets(e2.worker.worker.store, {bad})
        (r,) = e2.generate([P], MAX_TOKENS)
        e2.close()
        assert r.external_hit_tokens == 96 and r.load_error_blocks == 1
        assert same(r, ref)  # recomputed from the failed block on


def test_producer_and_consumer():
    (ref,) = scratch([P])
    with HeldStore():
        prefix = f"pd{uuid.uuid4().hex[:6]}"
        prod = engine(vllm_kv_config("kv_producer", cache_prefix=prefix))
        (rp,) = prod.generate([P], 1)
        prod.close()
        assert prod.connector_stats()["saved_objects"] == 12
        assert prod.scheduler.get_num_new_matched_tokens(rp, 0) == (0, False)
        cons = engine(vllm_kv_config("kv_consumer", cache_prefix=prefix))
        (r,) = cons.generate([P], MAX_TOKENS)
        cons.close()
        assert r.external_hit_tokens == 96 and same(r, ref)
        assert cons.connector_stats()["saved_objects"] == 0


def test_a_consumer_waits_for_the_blocks_its_producer_named():
    with HeldStore():
        prefix = f"pw{uuid.uuid4().hex[:6]}"
        cons = engine(vllm_kv_config("kv_consumer", cache_prefix=prefix, remote_wait_s=30))
        req = cons.add_request(P, 1)
        cons.waiting.clear()
        req.kv_transfer_params = {"tierkv_stored_tokens": 96}
        assert cons.scheduler.get_num_new_matched_tokens(req, 0) == (None, False)
        prod = engine(vllm_kv_config("kv_producer", cache_prefix=prefix))
        prod.generate([P], 1)
        prod.close()
        assert cons.scheduler.get_num_new_matched_tokens(req, 0) == (96, False)
        cons.close()
        # The wait ends at remote_wait_s: then whatever is there (here nothing) is used.
        quick = engine(vllm_kv_config("kv_consumer", cache_prefix=prefix + "x",
                                      remote_wait_s=0.2))
        req2 = quick.add_request(P, 1)
        quick.waiting.clear()
        req2.kv_transfer_params = {"tierkv_stored_tokens": 96}
        assert quick.scheduler.get_num_new_matched_tokens(req2, 0) == (None, False)
        time.sleep(0.3)
        assert quick.scheduler.get_num_new_matched_tokens(req2, 0) == (0, False)
        quick.close()


@pytest.mark.parametrize("change", ["dtype", "block_size", "layout"])
def test_another_layout_never_reads_these_objects(change, monkeypatch):
    """The same prompt and cache_prefix, the engine configured differently: a miss (the
    fingerprint differs), never KV of another layout."""
    with HeldStore():
        cfg = vllm_kv_config()
        e1 = engine(cfg)
        e1.generate([P], MAX_TOKENS)
        e1.close()
        model, bs = ModelConfig(), BS
        if change == "dtype":
            model = ModelConfig(dtype="bfloat16")
        elif change == "block_size":
            bs = 2 * BS
        else:
            monkeypatch.setenv("VLLM_KV_CACHE_LAYOUT", "HND")
        e2 = engine(cfg, model=model, block_size=bs)
        assert e2.worker.fingerprint != e1.worker.fingerprint
        (ref,) = scratch([P], model=model) if bs == BS else [None]
        (r,) = e2.generate([P], MAX_TOKENS)
        e2.close()
        assert r.external_hit_tokens == 0 and r.load_error_blocks == 0
        if ref is not None:
            assert same(r, ref)
        # The unchanged engine still hits.
        monkeypatch.delenv("VLLM_KV_CACHE_LAYOUT", raising=False)
        e3 = engine(cfg)
        (r3,) = e3.generate([P], MAX_TOKENS)
        e3.close()
        assert r3.external_hit_tokens == 96


def test_lookup_async_answers_none_then_the_hit():
    (ref,) = scratch([P])
    with HeldStore():
        cfg = vllm_kv_config()
        e1 = engine(cfg)
        e1.generate([P], MAX_TOKENS)
        e1.close()
        cfg2 = vllm_kv_config(cache_prefix=cfg["kv_connector_extra_config"]["cache_prefix"],
                              lookup_async=True)
        e2 = engine(cfg2)
        (r,) = e2.generate([P], MAX_TOKENS)
        e2.close()
        assert r.external_hit_tokens == 96 and same(r, ref)


class _GatedPuts:
    def __init__(self, store):
        self._store = store
        self.gate = threading.Event()

    def batch_put_from(self, *args):
        self.gate.wait()
        return self._store.batch_put_from(*args)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_blocks_stay_until_their_puts_end_and_steps_never_wait_for_puts():
    (ref,) = scratch([P])
    with HeldStore():
        e = engine(vllm_kv_config())
        gated = _GatedPuts(e.worker.worker.store)
        e.worker.worker.store = gated
        e.add_request(P, MAX_TOKENS)
        while e.running or e.waiting:
            e.step()  # steps return although no put can end
        (r,) = e.finishing.values()
        assert same(r, ref)
        for _ in range(3):
            e.step()
        assert r.request_id in e.finishing  # blocks kept while its puts are in flight
        gated.gate.set()
        deadline = time.monotonic() + 30
        while e.finishing:
            assert time.monotonic() < deadline
            e.step()
        assert e.connector_stats()["saved_objects"] == 12
        assert e.blocks.num_available() == e.blocks.num_blocks
        e.close()


def test_preemption_in_the_middle_of_a_save_never_stores_wrong_bytes():
    """A request is preempted while its puts are held back, and another request's prefill
    overwrites its freed blocks before the puts run: what tierkv stored is still the
    preempted request's KV (the saves read from staging, not from the engine's blocks)."""
    r_prompt = prompt(3, 100)
    ref_p, ref_r = scratch([P, r_prompt])
    with HeldStore():
        cfg = vllm_kv_config()
        e = engine(cfg, num_blocks=7)  # one request's worth: the next one reuses its blocks
        gated = _GatedPuts(e.worker.worker.store)
        e.worker.worker.store = gated
        a = e.add_request(P, MAX_TOKENS)
        e.step()  # a's prefill: its blocks gathered into staging, the puts held
        assert a.output_token_ids and gated.gate.is_set() is False
        old_blocks = list(a.block_ids)
        e.preempt(a.request_id)
        b = e.add_request(r_prompt, MAX_TOKENS)
        e.waiting.remove(b)
        e.waiting.insert(0, b)  # b first: it takes (and overwrites) a's freed blocks
        e.step()
        assert b.output_token_ids and set(b.block_ids) == set(old_blocks)
        gated.gate.set()
        deadline = time.monotonic() + 60
        while e.has_work():
            assert time.monotonic() < deadline
            e.step()
        assert same(a, ref_p) and same(b, ref_r)  # a started over and finished alike
        e.close()
        e2 = engine(cfg)
        (r,) = e2.generate([P], MAX_TOKENS)
        e2.close()
        assert r.external_hit_tokens == 96 and r.load_error_blocks == 0 and same(r, ref_p)
