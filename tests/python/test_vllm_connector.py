"""tierkv.integrations.vllm.TierkvConnector against vLLM's interface as vLLM calls it (the
test doubles of tests/python/doubles/vllm mirror vLLM's classes): loaded by the factory,
vLLM's FlashAttention layout, several KV-cache groups (full attention plus sliding window),
chunked prefill, preemption in the middle of a save, KV events, stats, and strict config."""

import json
import time
from types import SimpleNamespace

import pytest
import torch

from engine_util import STORE_CONF, HeldStore
from vllm_util import (BS, HD, HEADS, _Blocks, _configs, _new, _output, _pair, _prefill,
                       _Request, _step)

from tierkv.integrations import vllm as tv


def test_flash_attention_layout_round_trip_and_partial_hits():
    with HeldStore():
        vc, kcc = _configs()
        s, w, caches = _pair(vc, kcc)
        tokens = list(range(1, 19))  # 18 tokens: 4 full blocks before the last token
        req = _Request("a", tokens)
        meta = _prefill(s, w, caches, req, [[1, 2, 3, 4, 5]])
        assert [len(x.groups[0][1]) for x in meta.saves] == [4]
        assert w.flush(30)
        assert s.request_finished(req, [1, 2, 3, 4, 5])[0] is True
        sending, _ = w.get_finished({"a"})
        assert sending == {"a"}
        want = {n: t[:, [1, 2, 3, 4]].clone() for n, t in caches.items()}
        # A second request with the same first 2 blocks, into other blocks.
        req2 = _Request("b", tokens[:8] + [99] * 6)
        s2, w2, caches2 = _pair(vc, kcc)
        n, is_async = s2.get_num_new_matched_tokens(req2, 0)
        assert (n, is_async) == (8, False)
        s2.update_state_after_alloc(req2, _Blocks([10, 11, 12, 13]), 8)
        meta = s2.build_connector_meta(_output([_new(req2, [[10, 11, 12, 13]], 8)],
                                               scheduled={"b": 6}))
        assert [lo.groups[0][1] for lo in meta.loads] == [[10, 11]]
        _step(w2, meta, caches2)
        for name in caches2:
            assert torch.equal(caches2[name][:, [10, 11]], want[name][:, [0, 1]])
        assert w2.get_block_ids_with_load_errors() == set()
        for c in (s, w, s2, w2):
            c.shutdown()


def test_cache_salt_and_lora_change_the_block_hashes_so_never_a_false_hit():
    with HeldStore():
        vc, kcc = _configs()
        s, w, caches = _pair(vc, kcc)
        tokens = list(range(1, 19))
        _prefill(s, w, caches, _Request("a", tokens), [[1, 2, 3, 4, 5]])
        w.flush(30)
        assert s.get_num_new_matched_tokens(_Request("b", tokens, salt="other"), 0) == (0, False)
        assert s.get_num_new_matched_tokens(_Request("c", tokens), 0) == (16, False)
        s.shutdown()
        w.shutdown()


def test_hybrid_groups_full_attention_and_sliding_window():
    with HeldStore():
        vc, kcc = _configs(groups=(("FullAttentionSpec", 2), ("SlidingWindowSpec", 1)))
        s, w, caches = _pair(vc, kcc)
        tokens = list(range(1, 19))
        req = _Request("a", tokens)
        blocks = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
        assert s.get_num_new_matched_tokens(req, 0) == (0, False)
        s.update_state_after_alloc(req, _Blocks(*blocks), 0)
        meta = s.build_connector_meta(_output([_new(req, blocks, 0)], scheduled={"a": 18}))
        assert [(g, len(ids)) for g, ids, _ in meta.saves[0].groups] == [(0, 4), (1, 4)]

        def write(name, t):
            for b in blocks[0] + blocks[1]:
                t[:, b] = float(b) + 0.5
        _step(w, meta, caches, write)
        w.flush(30)
        s2, w2, caches2 = _pair(vc, kcc)
        req2 = _Request("b", tokens)
        assert s2.get_num_new_matched_tokens(req2, 0) == (16, False)
        # The sliding-window group's blocks outside the window are vLLM's null block (0).
        s2.update_state_after_alloc(req2, _Blocks([11, 12, 13, 14, 15], [0, 0, 18, 19, 20]), 16)
        meta = s2.build_connector_meta(_output(
            [_new(req2, [[11, 12, 13, 14, 15], [0, 0, 18, 19, 20]], 16)], scheduled={"b": 2}))
        loads = meta.loads[0].groups
        assert loads[0][1] == [11, 12, 13, 14] and loads[1][1] == [18, 19]
        _step(w2, meta, caches2)
        full = "model.layers.0.self_attn.attn"
        swa = "model.layers.2.self_attn.attn"
        assert torch.equal(caches2[full][:, 11], torch.full((2, BS, HEADS, HD), 1.5))
        assert torch.equal(caches2[swa][:, 18], torch.full((2, BS, HEADS, HD), 8.5))
        assert torch.equal(caches2[swa][:, 0], torch.zeros(2, BS, HEADS, HD))  # untouched
        for c in (s, w, s2, w2):
            c.shutdown()


def test_chunked_prefill_saves_each_block_once_as_it_completes():
    with HeldStore():
        vc, kcc = _configs()
        s, w, caches = _pair(vc, kcc)
        req = _Request("a", list(range(1, 19)))
        blocks = [[1, 2, 3, 4, 5]]
        s.get_num_new_matched_tokens(req, 0)
        s.update_state_after_alloc(req, _Blocks(*blocks), 0)
        m1 = s.build_connector_meta(_output([_new(req, blocks, 0)], scheduled={"a": 6}))
        cached = SimpleNamespace(req_ids=["a"], resumed_req_ids=set(), new_token_ids=[[]],
                                 new_block_ids=[None], num_computed_tokens=[6])
        m2 = s.build_connector_meta(_output(cached=cached, scheduled={"a": 12}))
        assert [sv.groups[0][1] for sv in m1.saves] == [[1]]        # tokens 0..5: block 0
        assert [sv.groups[0][1] for sv in m2.saves] == [[2, 3, 4]]  # 6..17, not the last
        s.shutdown()
        w.shutdown()


class _SlowPuts:
    def __init__(self, store, delay):
        self._store, self.delay = store, delay

    def batch_put_from(self, *args):
        time.sleep(self.delay)
        return self._store.batch_put_from(*args)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_preemption_in_the_middle_of_a_save_never_stores_wrong_bytes():
    """The request is preempted while its puts are in flight and its blocks are overwritten
    by another request at once: what was stored is still the request's own KV."""
    with HeldStore():
        vc, kcc = _configs()
        s, w, caches = _pair(vc, kcc)
        w.worker.store = _SlowPuts(w.worker.store, 0.3)
        tokens = list(range(1, 19))
        req = _Request("a", tokens)
        _prefill(s, w, caches, req, [[1, 2, 3, 4, 5]], seed=7)
        want = {n: t[:, [1, 2, 3, 4]].clone() for n, t in caches.items()}
        s.build_connector_meta(_output(preempted={"a"}))
        w.handle_preemptions({"a"})
        for t in caches.values():  # the blocks go to another request right away
            t[:, 1:6] = -1.0
        assert w.flush(30)
        s2, w2, caches2 = _pair(vc, kcc)
        req2 = _Request("b", tokens)
        assert s2.get_num_new_matched_tokens(req2, 0) == (16, False)
        s2.update_state_after_alloc(req2, _Blocks([20, 21, 22, 23, 24]), 16)
        meta = s2.build_connector_meta(_output([_new(req2, [[20, 21, 22, 23, 24]], 16)],
                                               scheduled={"b": 2}))
        _step(w2, meta, caches2)
        for n in caches2:
            assert torch.equal(caches2[n][:, [20, 21, 22, 23]], want[n])
        for c in (s, w, s2, w2):
            c.shutdown()


def test_kv_events_and_stats():
    with HeldStore():
        vc, kcc = _configs()
        s, w, caches = _pair(vc, kcc)
        req = _Request("a", list(range(1, 19)))
        _prefill(s, w, caches, req, [[1, 2, 3, 4, 5]])
        w.flush(30)
        events = w.get_kv_connector_kv_cache_events()
        got = events.get_all_events()
        stored = [h for e in got for h in _event_hashes(e)]
        assert sorted(stored) == sorted(req.block_hashes[:4])  # once per block, not per layer
        s.update_connector_output(SimpleNamespace(kv_cache_events=events))
        assert len(list(s.take_events())) == len(got)
        assert list(s.take_events()) == []
        st = w.get_kv_connector_stats()
        assert st.data["saved_objects"] == 8 and not st.is_empty()
        agg = tv.TierkvConnector.build_kv_connector_stats(dict(st.data)).aggregate(st)
        assert agg.reduce()["saved_objects"] == 16
        assert w.get_kv_connector_stats() is None  # counters since the last call
        s.shutdown()
        w.shutdown()


def _event_hashes(e):
    hs = getattr(e, "block_hashes", None)
    return hs if hs is not None else e["block_hashes"]


@pytest.mark.parametrize("extra, message", [
    ({"typo": 1}, "unknown key"),
    ({"load_async": "yes"}, "load_async"),
    ({"enable_cross_layers_blocks": 2}, "enable_cross_layers_blocks"),
    ({"lookup_rpc_port": -1}, "lookup_rpc_port"),
    ({"cache_prefix": "a@b"}, "cache_prefix"),
    ({"staging_buffer_size": 0}, "staging_buffer_size"),
    ({"store": "x"}, "store"),
])
def test_extra_config_is_parsed_strictly(extra, message):
    vc, kcc = _configs(**extra)
    with pytest.raises(ValueError, match=message):
        tv.TierkvConnector(vc, tv.KVConnectorRole.SCHEDULER, kcc)


def test_store_config_from_mooncake_config_path_and_env(tmp_path, monkeypatch):
    from tierkv.integrations import _common
    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps({"local_hostname": "10.0.0.5", "metadata_server": "P2PHANDSHAKE",
                                "master_server_address": "127.0.0.1:50051",
                                "global_segment_size": 3200, "protocol": "tcp",
                                "transfer_timeout": 1}))
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(path))
    conf, source = _common.store_setup_config(None)
    assert source == str(path) and conf["master_server_address"] == "127.0.0.1:50051"
    assert conf["local_hostname"] == "10.0.0.5" and "transfer_timeout" not in conf
    monkeypatch.setenv("MOONCAKE_REQUESTER_LOCAL_HOSTNAME", "10.0.0.9")
    assert _common.store_setup_config(None)[0]["local_hostname"] == "10.0.0.9"
    monkeypatch.delenv("MOONCAKE_CONFIG_PATH")
    conf, source = _common.store_setup_config(None)
    assert source == "embedded defaults" and conf["master_server_address"] == ""
    monkeypatch.setenv("TIERKV_STORE_CONFIG", str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="TIERKV_STORE_CONFIG"):
        _common.store_setup_config(None)


def test_a_bad_env_value_is_an_error_not_a_default(monkeypatch):
    monkeypatch.setenv("VLLM_MOONCAKE_DISK_STAGING_USABLE_RATIO", "1.5")
    vc, kcc = _configs()
    with pytest.raises(ValueError, match="VLLM_MOONCAKE_DISK_STAGING_USABLE_RATIO"):
        tv.TierkvConnector(vc, tv.KVConnectorRole.SCHEDULER, kcc)


def test_layout_fingerprint_covers_what_determines_the_bytes():
    from tierkv.integrations._common import layout_fingerprint
    base = dict(model="m", kv_dtype="bfloat16", block_size=16, layout="NHD", num_layers=32,
                kv_heads=8, head_size=128, tp_size=2, pp_size=1)
    fp = layout_fingerprint(**base)
    assert fp == layout_fingerprint(**dict(base))
    for k, v in (("model", "n"), ("kv_dtype", "float16"), ("block_size", 32), ("layout", "HND"),
                 ("num_layers", 31), ("kv_heads", 4), ("head_size", 64), ("tp_size", 4),
                 ("pp_size", 2)):
        assert layout_fingerprint(**dict(base, **{k: v})) != fp, k
    assert len(fp) == 16


def test_tier_log_names_memory_and_disk_hits(monkeypatch, caplog):
    monkeypatch.setenv("VLLM_MOONCAKE_STORE_TIER_LOG", "true")
    with HeldStore():
        vc, kcc = _configs()
        s, w, caches = _pair(vc, kcc)
        tokens = list(range(1, 19))
        _prefill(s, w, caches, _Request("a", tokens), [[1, 2, 3, 4, 5]])
        w.flush(30)
        req = _Request("b", tokens)
        s.get_num_new_matched_tokens(req, 0)
        s.update_state_after_alloc(req, _Blocks([6, 7, 8, 9, 10]), 16)
        meta = s.build_connector_meta(_output([_new(req, [[6, 7, 8, 9, 10]], 16)],
                                              scheduled={"b": 2}))
        with caplog.at_level("INFO", logger="tierkv.integrations.vllm"):
            _step(w, meta, caches)
        assert "4 objects, 4 from memory, 0 from disk, 0 missing" in caplog.text
        s.shutdown()
        w.shutdown()


def test_disk_staging_usable_ratio_bounds_each_load_batch(monkeypatch):
    from tierkv.integrations._common import parse_size
    assert parse_size("x", "4MB") == 4 << 20 and parse_size("x", "1.5GiB") == 3 << 29
    assert parse_size("x", 1024) == 1024
    with pytest.raises(ValueError, match="x"):
        parse_size("x", "4 parsecs")
    monkeypatch.setenv("VLLM_MOONCAKE_DISK_STAGING_USABLE_RATIO", "0.5")
    with HeldStore(dict(STORE_CONF, staging_buffer_size="2MB")):
        vc, kcc = _configs(store=dict(STORE_CONF, staging_buffer_size="2MB"))
        c = tv.TierkvConnector(vc, tv.KVConnectorRole.SCHEDULER, kcc)
        assert c.options.load_batch_bytes == 1 << 20  # half of the 2 MiB staging buffer
        c.shutdown()


def test_done_sending_names_only_requests_whose_free_was_delayed():
    """vLLM frees a request's blocks when done_sending names it: a request that never saved
    (request_finished said free now) must never be named."""
    with HeldStore():
        vc, kcc = _configs()
        s, w, caches = _pair(vc, kcc)
        req = _Request("saved", list(range(1, 19)))
        _prefill(s, w, caches, req, [[1, 2, 3, 4, 5]])
        short = _Request("short", [1, 2, 3])  # no full block: nothing to save
        assert s.get_num_new_matched_tokens(short, 0) == (0, False)
        s.update_state_after_alloc(short, _Blocks([9]), 0)
        meta = s.build_connector_meta(_output([_new(short, [[9]], 0)], scheduled={"short": 3}))
        assert meta.saves == []
        _step(w, meta, caches)
        assert s.request_finished(short, [9]) == (False, None)
        assert s.request_finished(req, [1, 2, 3, 4, 5])[0] is True
        assert w.flush(30)
        assert w.get_finished({"saved", "short"}) == ({"saved"}, None)
        assert w.get_finished({"short"}) == (None, None)
        s.shutdown()
        w.shutdown()
