"""TierkvConnector loaded and driven through the vLLM test double (tests/python/doubles/vllm,
mirroring vLLM's factory, base classes, Request hashing, SchedulerOutput and KV events): the
factory builds it from kv_connector_module_path for both roles (hybrid manager on), a request
goes through vLLM's call sequence, its blocks come back into another engine's blocks, KV
events reach take_events, and handle_preemptions takes the step's metadata."""

import uuid

import torch

from engine_util import STORE_CONF, HeldStore

from vllm.config import CacheConfig, ModelConfig, ParallelConfig, SchedulerConfig, VllmConfig
from vllm.config.kv_transfer import KVTransferConfig
from vllm.distributed.kv_events import BlockStored
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorRole,
    SupportsHMA,
)
from vllm.utils.hashing import sha256
from vllm.v1.core.kv_cache_manager import KVCacheBlocks
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.output import CachedRequestData, NewRequestData, SchedulerOutput
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
)
from vllm.v1.outputs import KVConnectorOutput
from vllm.v1.request import Request

BS, NB = 16, 24
LAYERS = [f"model.layers.{i}.self_attn.attn" for i in range(2)]


def _vllm_config(**extra):
    e = {"load_async": False, "cache_prefix": f"f{uuid.uuid4().hex[:8]}",
         "store": dict(STORE_CONF), "staging_buffer_size": 1 << 20}
    e.update(extra)
    ktc = KVTransferConfig(kv_connector="TierkvConnector",
                           kv_connector_module_path="tierkv.integrations.vllm",
                           kv_role="kv_both", kv_connector_extra_config=e,
                           kv_load_failure_policy="recompute")
    return VllmConfig(model_config=ModelConfig(model="org/llama-x", dtype="float32"),
                      cache_config=CacheConfig(block_size=BS),
                      parallel_config=ParallelConfig(),
                      scheduler_config=SchedulerConfig(disable_hybrid_kv_cache_manager=False),
                      kv_transfer_config=ktc)


def _kv_cache_config():
    spec = FullAttentionSpec(block_size=BS, num_kv_heads=2, head_size=8, dtype=torch.float32)
    return KVCacheConfig(num_blocks=NB, kv_cache_tensors=[KVCacheTensor(size=0, shared_by=[n])
                                                          for n in LAYERS],
                         kv_cache_groups=[KVCacheGroupSpec(layer_names=list(LAYERS),
                                                           kv_cache_spec=spec)])


def _engine(vc, kcc):
    s = KVConnectorFactory.create_connector(vc, KVConnectorRole.SCHEDULER, kcc)
    w = KVConnectorFactory.create_connector(vc, KVConnectorRole.WORKER, kcc)
    caches = {n: torch.zeros(2, NB, BS, 2, 8) for n in LAYERS}
    w.register_kv_caches(caches)
    return s, w, caches


def _request(rid, tokens, salt=None):
    return Request(rid, list(tokens), cache_salt=salt,
                   block_hasher=get_request_block_hasher(BS, sha256))


def _forward(w, meta, caches, write=None):
    w.handle_preemptions(meta)
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    for n, t in caches.items():
        w.wait_for_layer_load(n)
        if write:
            write(n, t)
        w.save_kv_layer(n, t, None)
    w.wait_for_save()


def _schedule(s, req, block_ids, n_local=0):
    """What vLLM's scheduler does for a waiting request: returns the step's output."""
    ext, load_async = s.get_num_new_matched_tokens(req, n_local)
    assert not load_async
    blocks = KVCacheBlocks.from_block_ids(block_ids)
    s.update_state_after_alloc(req, blocks, ext)
    req.num_computed_tokens = n_local + ext
    out = SchedulerOutput.make_empty()
    out.scheduled_new_reqs = [NewRequestData.from_request(req, (list(block_ids),))]
    out.num_scheduled_tokens = {req.request_id: req.num_tokens - req.num_computed_tokens}
    out.total_num_scheduled_tokens = req.num_tokens - req.num_computed_tokens
    out.kv_connector_metadata = s.build_connector_meta(out)
    return out, ext


def test_loaded_by_vllms_factory_and_driven_through_its_call_sequence():
    init_none_hash(sha256)
    with HeldStore():
        vc, kcc = _vllm_config(), _kv_cache_config()
        s, w, caches = _engine(vc, kcc)
        assert isinstance(s, KVConnectorBase_V1) and isinstance(s, SupportsHMA)
        assert type(s).__module__ == "tierkv.integrations.vllm"
        tokens = list(range(100, 150))  # 50 tokens: 3 full blocks before the last token
        req = _request("r1", tokens)
        out, ext = _schedule(s, req, [3, 4, 5, 6])
        assert ext == 0 and len(out.kv_connector_metadata.saves) == 1

        def write(name, t):
            t[:, 3:7] = torch.arange(4 * 2 * BS * 16, dtype=torch.float32).view(
                2, 4, BS, 2, 8) + LAYERS.index(name)
        _forward(w, out.kv_connector_metadata, caches, write)
        req.num_computed_tokens += out.num_scheduled_tokens["r1"]
        delay, params = s.request_finished_all_groups(req, ([3, 4, 5, 6],))
        assert delay is True and params is None
        w.clear_connector_metadata()
        deadline = 200
        sending = None
        while not sending and deadline:
            w.bind_connector_metadata(s.build_connector_meta(SchedulerOutput.make_empty()))
            sending, _ = w.get_finished({"r1"})
            w.clear_connector_metadata()
            deadline -= 1
            import time
            time.sleep(0.01)
        assert sending == {"r1"}
        # The worker's KV events reach the scheduler side (as vLLM's output aggregation does).
        s.update_connector_output(KVConnectorOutput(
            finished_sending=sending, kv_cache_events=w.get_kv_connector_kv_cache_events()))
        events = list(s.take_events())
        assert [type(e) for e in events] == [BlockStored]
        assert events[0].block_hashes == req.block_hashes[:3] and events[0].medium == "tierkv"
        want = {n: t[:, 3:6].clone() for n, t in caches.items()}

        # Another engine (same config): vLLM's hashes of the same prompt hit 3 blocks.
        s2, w2, caches2 = _engine(vc, kcc)
        req2 = _request("r2", tokens)
        out2, ext2 = _schedule(s2, req2, [10, 11, 12, 13])
        assert ext2 == 48
        assert [lo.groups[0][1] for lo in out2.kv_connector_metadata.loads] == [[10, 11, 12]]
        _forward(w2, out2.kv_connector_metadata, caches2)
        assert w2.get_block_ids_with_load_errors() == set()
        w2.clear_connector_metadata()
        for n in LAYERS:
            assert torch.equal(caches2[n][:, 10:13], want[n])
        # cache_salt is in vLLM's block hashes: the same tokens with another salt miss.
        assert s2.get_num_new_matched_tokens(_request("r3", tokens, salt="tenant-b"), 0) \
            == (0, False)
        for c in (s, w, s2, w2):
            c.shutdown()


def test_handle_preemptions_takes_the_steps_metadata():
    init_none_hash(sha256)
    with HeldStore():
        vc, kcc = _vllm_config(), _kv_cache_config()
        s, w, caches = _engine(vc, kcc)
        out = SchedulerOutput.make_empty()
        out.preempted_req_ids = {"gone"}
        meta = s.build_connector_meta(out)
        assert meta.preempted_req_ids == {"gone"}
        w.handle_preemptions(meta)   # current vLLM: the metadata
        w.handle_preemptions({"gone"})  # older vLLM: the ids
        cached = CachedRequestData.make_empty()
        assert cached.resumed_req_ids == set()
        for c in (s, w):
            c.shutdown()


def test_built_as_a_multiconnector_child_it_reads_its_own_transfer_config():
    """vLLM's MultiConnector builds each child as cls(copy of vllm_config with the child's
    KVTransferConfig, role, kv_cache_config) — always three arguments."""
    import copy

    with HeldStore():
        parent = _vllm_config()
        parent.kv_transfer_config = KVTransferConfig(
            kv_connector="MultiConnector", kv_role="kv_both",
            kv_connector_extra_config={"connectors": [
                {"kv_connector": "SomeP2PConnector", "kv_role": "kv_both"},
                {"kv_connector": "TierkvConnector",
                 "kv_connector_module_path": "tierkv.integrations.vllm",
                 "kv_role": "kv_consumer",
                 "kv_connector_extra_config": {"store": dict(STORE_CONF),
                                               "cache_prefix": "child", "load_async": False}},
            ]})
        child = parent.kv_transfer_config.kv_connector_extra_config["connectors"][1]
        temp = copy.copy(parent)
        temp.kv_transfer_config = KVTransferConfig(
            **child, engine_id=parent.kv_transfer_config.engine_id)
        cls = KVConnectorFactory.get_connector_class(temp.kv_transfer_config)
        c = cls(temp, KVConnectorRole.WORKER, _kv_cache_config())
        assert c.kv_role == "kv_consumer" and c.options.cache_prefix == "child"
        assert not c.options.load_async
        c.shutdown()
