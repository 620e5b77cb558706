"""tierkv's vLLM connector with Mamba state groups (vLLM's hybrid models, mamba_cache_mode
"all") and the BlockRemoved events of blocks the store no longer holds."""

import time
from types import SimpleNamespace

import pytest
import torch

from engine_util import HeldStore
from vllm_util import BS, NB, _Blocks, _configs, _new, _output, _pair, _prefill, _Request

from tierkv.integrations import vllm as tv

ATTN = "model.layers.0.self_attn.attn"
MIXER = "model.layers.1.mixer"
CONV, SSM = ((3, 4), torch.float16), ((2, 8), torch.float32)


def _mamba_configs(mode="all", states=(CONV, SSM)):
    vc, kcc = _configs(groups=(("FullAttentionSpec", 1),))
    spec = type("MambaSpec", (SimpleNamespace,), {})(
        block_size=BS, shapes=tuple(s for s, _ in states), dtypes=tuple(d for _, d in states),
        page_size_padded=None, mamba_type="mamba2", mamba_cache_mode=mode,
        num_speculative_blocks=0)
    kcc.kv_cache_groups.append(SimpleNamespace(layer_names=[MIXER], kv_cache_spec=spec))
    return vc, kcc


def _state_tensors(states=(CONV, SSM)):
    """vLLM's Mamba layer: state tensors [num_blocks, *shape], strided views into one page per
    block (as vLLM carves them out of the layer's raw buffer)."""
    sizes = [torch.Size(s).numel() * torch.tensor([], dtype=d).element_size() for s, d in states]
    raw = torch.zeros(NB, sum(sizes) + 8, dtype=torch.uint8)  # + padding, as page_size_padded
    out, off = [], 0
    for (shape, dtype), n in zip(states, sizes):
        out.append(raw[:, off:off + n].view(dtype).view(NB, *shape))
        off += n
    return out


def _mamba_pair(vc, kcc, states=(CONV, SSM)):
    s = tv.TierkvConnector(vc, tv.KVConnectorRole.SCHEDULER, kcc)
    w = tv.TierkvConnector(vc, tv.KVConnectorRole.WORKER, kcc)
    caches = {ATTN: torch.zeros(2, NB, BS, 2, 8), MIXER: _state_tensors(states)}
    w.register_kv_caches(caches)
    return s, w, caches


def _forward(w, meta, caches, write=None, after_start=None):
    """One forward as vLLM runs it: only attention layers call the per-layer hooks."""
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    if after_start is not None:
        after_start()
    w.wait_for_layer_load(ATTN)
    if write is not None:
        write()
    w.save_kv_layer(ATTN, caches[ATTN], None)
    w.wait_for_save()
    w.clear_connector_metadata()


def _whole_prompt_step(s, blocks=((1, 2, 3, 4, 5), (6, 7, 8, 9, 10))):
    """Request "a" (18 tokens: 4 full blocks before the last) scheduled whole in one step,
    nothing cached: (request, its blocks per group, the step's metadata)."""
    req = _Request("a", list(range(1, 19)))
    blocks = [list(b) for b in blocks]
    s.update_state_after_alloc(req, _Blocks(*blocks), 0)
    return req, blocks, s.build_connector_meta(_output([_new(req, blocks, 0)],
                                                       scheduled={"a": 18}))


def _write_all(caches, attn_blocks, state_blocks):
    def write():
        for b in attn_blocks:
            caches[ATTN][:, b] = float(b) + 0.25
        for i, t in enumerate(caches[MIXER]):
            for b in state_blocks:  # the state after each block: distinct per block
                t[b] = float(b * 10 + i)
    return write


def test_mamba_states_round_trip_with_attention_and_load_before_the_forward():
    with HeldStore():
        vc, kcc = _mamba_configs()
        s, w, caches = _mamba_pair(vc, kcc)
        req = _Request("a", list(range(1, 19)))  # 4 full blocks before the last token
        blocks = [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]]
        assert s.get_num_new_matched_tokens(req, 0) == (0, False)
        s.update_state_after_alloc(req, _Blocks(*blocks), 0)
        meta = s.build_connector_meta(_output([_new(req, blocks, 0)], scheduled={"a": 18}))
        assert [(g, ids) for g, ids, _ in meta.saves[0].groups] == [(0, [1, 2, 3, 4]),
                                                                     (1, [6, 7, 8, 9])]
        _forward(w, meta, caches, _write_all(caches, blocks[0], blocks[1]))
        assert w.flush(30)
        want = [t[[6, 7, 8, 9]].clone() for t in caches[MIXER]]

        s2, w2, caches2 = _mamba_pair(vc, kcc)
        req2 = _Request("b", list(range(1, 19)))
        assert s2.get_num_new_matched_tokens(req2, 0) == (16, False)
        s2.update_state_after_alloc(req2, _Blocks([11, 12, 13, 14, 15], [16, 17, 18, 19, 20]),
                                    16)
        meta = s2.build_connector_meta(_output(
            [_new(req2, [[11, 12, 13, 14, 15], [16, 17, 18, 19, 20]], 16)], scheduled={"b": 2}))
        seen = {}

        def states_before_the_forward():  # no hook waits for a Mamba layer
            seen["states"] = [t[[16, 17, 18, 19]].clone() for t in caches2[MIXER]]
        _forward(w2, meta, caches2, after_start=states_before_the_forward)
        for got, exp in zip(seen["states"], want):
            assert torch.equal(got, exp)
        assert torch.equal(caches2[ATTN][:, 11], torch.full((2, BS, 2, 8), 1.25))
        assert w2.get_block_ids_with_load_errors() == set()
        # A lost Mamba state of block 2 ends the hit there (the attention KV alone is no hit).
        h = req.block_hashes[2].hex()
        assert s2.store.remove(s2.keys.layer_key(1, 1, h), force=True) == 0
        assert s2.get_num_new_matched_tokens(_Request("c", list(range(1, 19))), 0) == (8, False)
        for c in (s, w, s2, w2):
            c.shutdown()


def test_a_mamba_layer_hook_does_not_save_twice():
    with HeldStore():
        vc, kcc = _mamba_configs()
        s, w, caches = _mamba_pair(vc, kcc)
        req, blocks, meta = _whole_prompt_step(s)
        w.bind_connector_metadata(meta)
        w.start_load_kv(None)
        for name in (ATTN, MIXER):  # an engine that hooked every layer
            w.wait_for_layer_load(name)
            w.save_kv_layer(name, caches[name], None)
        w.wait_for_save()
        w.clear_connector_metadata()
        assert w.flush(30)
        assert w.get_kv_connector_stats().data["saved_objects"] == 8
        s.shutdown()
        w.shutdown()


def test_mamba_state_shapes_are_in_the_fingerprint():
    with HeldStore():
        vc, kcc = _mamba_configs()
        s, w, caches = _mamba_pair(vc, kcc)
        req, blocks, meta = _whole_prompt_step(s)
        _forward(w, meta, caches, _write_all(caches, blocks[0], blocks[1]))
        assert w.flush(30)
        other = (CONV, ((2, 4), torch.float32))
        vc2, kcc2 = _mamba_configs(states=other)
        vc2.kv_transfer_config.kv_connector_extra_config = vc.kv_transfer_config.\
            kv_connector_extra_config
        s2 = tv.TierkvConnector(vc2, tv.KVConnectorRole.SCHEDULER, kcc2)
        assert s2.fingerprint != s.fingerprint
        assert s2.get_num_new_matched_tokens(_Request("b", list(range(1, 19))), 0) == (0, False)
        assert s.get_num_new_matched_tokens(_Request("c", list(range(1, 19))), 0) == (16, False)
        for c in (s, w, s2):
            c.shutdown()


def test_mamba_groups_refused_unless_a_state_is_cached_at_every_block():
    for mode in ("align", "none"):
        vc, kcc = _mamba_configs(mode=mode)
        with pytest.raises(ValueError, match=f"mamba_cache_mode '{mode}'"):
            tv.TierkvConnector(vc, tv.KVConnectorRole.SCHEDULER, kcc)


def test_state_tensors_only_for_mamba_layers():
    with HeldStore():
        vc, kcc = _mamba_configs()
        w = tv.TierkvConnector(vc, tv.KVConnectorRole.WORKER, kcc)
        with pytest.raises(ValueError, match="list of state tensors"):
            w.register_kv_caches({ATTN: _state_tensors(), MIXER: _state_tensors()})
        w.shutdown()


# ---- BlockRemoved ------------------------------------------------------------------------


def _events_configs(**extra):
    vc, kcc = _configs(**extra)
    vc.kv_events_config = SimpleNamespace(enable_kv_cache_events=True)
    return vc, kcc


def _stored_and_announced(s, w, caches, req):
    _prefill(s, w, caches, req, [[1, 2, 3, 4, 5]])
    assert w.flush(30)
    events = w.get_kv_connector_kv_cache_events()
    s.update_connector_output(SimpleNamespace(kv_cache_events=events))
    return list(s.take_events())


def _kind(e):
    return e["type"] if isinstance(e, dict) else type(e).__name__


def _hashes(e):
    return e["block_hashes"] if isinstance(e, dict) else e.block_hashes


def test_block_removed_when_the_store_loses_a_block():
    with HeldStore():
        vc, kcc = _events_configs(removed_check_interval_s=0.05)
        s, w, caches = _pair(vc, kcc)
        req = _Request("a", list(range(1, 19)))
        events = _stored_and_announced(s, w, caches, req)
        assert [_kind(e) for e in events] == ["BlockStored"]
        # One layer of block 2 is gone (evicted, removed, lost with its store): a hit on it is
        # no longer possible, so the block is reported removed, once.
        assert s.store.remove(s.keys.layer_key(0, 1, req.block_hashes[2].hex()), force=True) == 0
        removed, deadline = [], time.monotonic() + 10
        while not removed and time.monotonic() < deadline:
            time.sleep(0.05)
            removed = [e for e in s.take_events() if _kind(e) == "BlockRemoved"]
        assert len(removed) == 1 and _hashes(removed[0]) == [req.block_hashes[2]]
        e = removed[0]
        assert (e["medium"] if isinstance(e, dict) else e.medium) == "tierkv"
        time.sleep(0.2)
        assert list(s.take_events()) == []  # reported once
        for c in (s, w):
            c.shutdown()


def test_block_removed_for_blocks_over_the_tracking_bound():
    with HeldStore():
        vc, kcc = _events_configs(removed_check_interval_s=3600, removed_track_blocks=3)
        s, w, caches = _pair(vc, kcc)
        req = _Request("a", list(range(1, 19)))
        events = _stored_and_announced(s, w, caches, req)
        kinds = [_kind(e) for e in events]
        assert kinds == ["BlockStored", "BlockRemoved"]
        assert _hashes(events[1]) == [req.block_hashes[0]]  # the oldest one dropped
        for c in (s, w):
            c.shutdown()


def test_no_removal_tracking_without_kv_events():
    with HeldStore():
        vc, kcc = _configs(removed_check_interval_s=0.05)
        s, w, caches = _pair(vc, kcc)
        req = _Request("a", list(range(1, 19)))
        assert [_kind(e) for e in _stored_and_announced(s, w, caches, req)] == ["BlockStored"]
        assert s.store.remove(s.keys.layer_key(0, 1, req.block_hashes[2].hex()), force=True) == 0
        time.sleep(0.3)
        assert list(s.take_events()) == []
        for c in (s, w):
            c.shutdown()


@pytest.mark.parametrize("extra, message", [
    ({"removed_check_interval_s": 0}, "removed_check_interval_s"),
    ({"removed_check_keys": 0}, "removed_check_keys"),
    ({"removed_track_blocks": -1}, "removed_track_blocks"),
])
def test_removal_options_are_checked(extra, message):
    vc, kcc = _events_configs(**extra)
    with pytest.raises(ValueError, match=message):
        tv.TierkvConnector(vc, tv.KVConnectorRole.SCHEDULER, kcc)
