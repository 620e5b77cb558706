"""Helpers of the vLLM connector tests: vLLM's configs, requests, scheduler outputs and a
forward's connector calls, as vLLM builds and makes them (CPU tensors)."""

import uuid
from types import SimpleNamespace

import torch

from engine_util import STORE_CONF

from tierkv.integrations import vllm as tv

BS, NB, HEADS, HD = 4, 32, 2, 8


def _spec(kind="FullAttentionSpec", **kw):
    cls = type(kind, (SimpleNamespace,), {})
    return cls(block_size=BS, num_kv_heads=HEADS, head_size=HD, dtype=torch.float32, **kw)


def _configs(role="kv_both", groups=(("FullAttentionSpec", 2),), **extra):
    e = {"load_async": False, "cache_prefix": f"c{uuid.uuid4().hex[:8]}",
         "store": dict(STORE_CONF), "staging_buffer_size": 1 << 20}
    e.update(extra)
    ktc = SimpleNamespace(kv_connector="TierkvConnector",
                          kv_connector_module_path="tierkv.integrations.vllm", kv_role=role,
                          kv_connector_extra_config=e)
    vc = SimpleNamespace(
        kv_transfer_config=ktc,
        model_config=SimpleNamespace(model="org/model-x", dtype=torch.float32, use_mla=False),
        cache_config=SimpleNamespace(block_size=BS, cache_dtype="auto"),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1,
                                        rank=0))
    layer = 0
    gs = []
    for kind, n in groups:
        names = [f"model.layers.{layer + i}.self_attn.attn" for i in range(n)]
        layer += n
        extra_spec = {"sliding_window": 2 * BS} if kind == "SlidingWindowSpec" else {}
        gs.append(SimpleNamespace(layer_names=names, kv_cache_spec=_spec(kind, **extra_spec)))
    kcc = SimpleNamespace(num_blocks=NB, kv_cache_groups=gs)
    return vc, kcc


def _pair(vc, kcc):
    s = tv.TierkvConnector(vc, tv.KVConnectorRole.SCHEDULER, kcc)
    w = tv.TierkvConnector(vc, tv.KVConnectorRole.WORKER, kcc)
    caches = {n: torch.zeros(2, NB, BS, HEADS, HD)  # vLLM's FlashAttention layout
              for g in kcc.kv_cache_groups for n in g.layer_names}
    w.register_kv_caches(caches)
    return s, w, caches


class _Request:
    """The fields of vLLM's Request the connector reads."""

    def __init__(self, rid, tokens, salt=""):
        self.request_id = rid
        self.prompt_token_ids = list(tokens)
        self.all_token_ids = list(tokens)
        self.num_tokens = len(tokens)
        self.num_computed_tokens = 0
        self.kv_transfer_params = None
        # One hash per full block, chained, salted (what vLLM's block_hashes carry).
        import hashlib
        h, self.block_hashes = b"", []
        for i in range(len(tokens) // BS):
            h = hashlib.sha256(h + repr((tokens[i * BS:(i + 1) * BS], salt)).encode()).digest()
            self.block_hashes.append(h)


class _Blocks:
    def __init__(self, *groups):
        self.groups = groups

    def get_block_ids(self):
        return tuple(list(g) for g in self.groups)


def _new(req, block_ids, computed):
    return SimpleNamespace(req_id=req.request_id, prompt_token_ids=req.prompt_token_ids,
                           block_ids=tuple(block_ids), num_computed_tokens=computed)


def _output(new=(), cached=None, scheduled=None, preempted=()):
    cached = cached or SimpleNamespace(req_ids=[], resumed_req_ids=set(), new_token_ids=[],
                                       new_block_ids=[], num_computed_tokens=[])
    return SimpleNamespace(scheduled_new_reqs=list(new), scheduled_cached_reqs=cached,
                           num_scheduled_tokens=dict(scheduled or {}),
                           preempted_req_ids=set(preempted), finished_req_ids=set())


def _step(w, meta, caches, write=None):
    """One forward: loads layer by layer, the model writing its KV (``write``), saves."""
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    for name, t in caches.items():
        w.wait_for_layer_load(name)
        if write is not None:
            write(name, t)
        w.save_kv_layer(name, t, None)
    w.wait_for_save()
    w.clear_connector_metadata()


def _fill(blocks, seed):
    def write(name, t):
        g = torch.Generator().manual_seed(seed + hash(name) % 1000)
        for b in blocks:
            t[:, b] = torch.randn(2, BS, HEADS, HD, generator=g)
    return write


def _prefill(s, w, caches, req, blocks, seed=1):
    """Schedules the whole prompt in one step (nothing cached) and runs it."""
    assert s.get_num_new_matched_tokens(req, 0) == (0, False)
    s.update_state_after_alloc(req, _Blocks(*blocks), 0)
    meta = s.build_connector_meta(_output([_new(req, blocks, 0)],
                                          scheduled={req.request_id: req.num_tokens}))
    _step(w, meta, caches, _fill(blocks[0], seed))
    return meta
