"""tierkv's vLLM connector inside vLLM's MultiConnector beside a point-to-point connector
(Mooncake's XpYd setup: the P2P connector first, the store connector second), loaded by
configuration alone through the vLLM test double (factory + MultiConnector, mirroring
vllm-project/vllm multi_connector.py @ 00f4240e) and driven by the tiny engine in vLLM's
call order: the scheduler's connector gets KVCacheBlocks, the step's metadata is pickled to
the worker, which binds it, loads, runs the layers, waits for its saves and reports
get_finished with the previous step's finished ids; the worker's KVConnectorOutput (also
pickled) goes back through update_connector_output and take_events.

The P2P child is tests/python/doubles/p2p_connector.py (NIXL-shaped: a prefiller keeps a
request's blocks until a decoder has read them)."""

import pickle
import threading
import time

import pytest
import torch

import p2p_connector
from engine_util import (BS, MAX_TOKENS, HeldStore, ModelConfig, prompt, same, scratch,
                         vllm_kv_config)
from tiny_engine import Engine
from tiny_engine.engine import FINISHED, RUNNING, WAITING_FOR_REMOTE_KVS
from tiny_engine.vllm_shapes import StepBuilder

from vllm.config import CacheConfig, ParallelConfig, SchedulerConfig, VllmConfig
from vllm.config import ModelConfig as VllmModelConfig
from vllm.config.kv_transfer import KVTransferConfig
from vllm.distributed.kv_events import BlockStored
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.multi_connector import (
    MultiConnector,
    MultiKVConnectorMetadata,
    MultiKVConnectorStats,
)
from vllm.v1.core.kv_cache_manager import KVCacheBlocks
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
)
from vllm.v1.outputs import KVConnectorOutput

P = prompt(1, 100)  # 6 full blocks before its last token
DEADLINE_S = 30


def p2p_config(role="kv_both", **extra):
    return {"kv_connector": "P2PConnector", "kv_connector_module_path": "p2p_connector",
            "kv_role": role, "kv_connector_extra_config": extra}


def multi_config(role, *children):
    """--kv-transfer-config of a MultiConnector (the children in load-preference order)."""
    return {"kv_connector": "MultiConnector", "kv_role": role,
            "kv_connector_extra_config": {"connectors": list(children)}}


class _SchedulerSide:
    """vLLM's scheduler hands update_state_after_alloc the request's KVCacheBlocks (the tiny
    engine keeps a list of block ids)."""

    def __init__(self, connector):
        self.connector = connector

    def update_state_after_alloc(self, request, block_ids, num_external_tokens):
        self.connector.update_state_after_alloc(
            request, KVCacheBlocks.from_block_ids(list(block_ids)), num_external_tokens)

    def __getattr__(self, name):
        return getattr(self.connector, name)


class _Hooks:
    def __init__(self, engine):
        self.e = engine

    def before_layer(self, i):
        self.e.worker.wait_for_layer_load(self.e.layer_names[i])

    def after_layer(self, i):
        self.e.worker.save_kv_layer(self.e.layer_names[i], self.e.kv[i], None)


class MultiEngine(Engine):
    """The tiny engine with its connector built by vLLM's factory from a --kv-transfer-config
    (any connector: here MultiConnector), driven in vLLM's order (module docstring)."""

    def __init__(self, kv_transfer_config, model=None, num_blocks=64, hma=False):
        super().__init__(model or ModelConfig(), num_blocks=num_blocks, block_size=BS,
                         kv_transfer_config=None, threads=1)
        c = self.cfg
        self.vllm_config = VllmConfig(
            model_config=VllmModelConfig(model=c.name, dtype=c.dtype, num_layers=c.n_layers,
                                         num_kv_heads=c.n_kv_heads, head_size=c.head_dim),
            cache_config=CacheConfig(block_size=BS), parallel_config=ParallelConfig(),
            scheduler_config=SchedulerConfig(disable_hybrid_kv_cache_manager=not hma),
            kv_transfer_config=KVTransferConfig(**kv_transfer_config))
        spec = FullAttentionSpec(block_size=BS, num_kv_heads=c.n_kv_heads, head_size=c.head_dim,
                                 dtype=getattr(torch, c.dtype))
        kcc = KVCacheConfig(
            num_blocks=num_blocks,
            kv_cache_tensors=[KVCacheTensor(size=0, shared_by=[n]) for n in self.layer_names],
            kv_cache_groups=[KVCacheGroupSpec(layer_names=list(self.layer_names),
                                              kv_cache_spec=spec)])
        self.multi = KVConnectorFactory.create_connector(self.vllm_config,
                                                         KVConnectorRole.SCHEDULER, kcc)
        self.worker = KVConnectorFactory.create_connector(self.vllm_config,
                                                          KVConnectorRole.WORKER, kcc)
        self.scheduler = _SchedulerSide(self.multi)
        self.worker.register_kv_caches(dict(zip(self.layer_names, self.kv)))
        self.role = None  # vLLM asks the connector whatever its role
        self.steps = StepBuilder()
        self.hooks = _Hooks(self)
        self.output = None          # the last step's KVConnectorOutput, for the scheduler
        self.outputs = []           # every step's (after pickling)
        self.metas = []             # every step's MultiKVConnectorMetadata (worker side)
        self.events = []            # what the scheduler's connector.take_events() yielded
        self.sent = []              # finished_sending as the scheduler saw it
        self._just_finished = set()  # SchedulerOutput.finished_req_ids of the next step
        self._closed = False

    def sub(self, i, side="worker"):
        return (self.worker if side == "worker" else self.multi).sub_connectors[i]

    def step(self):
        bs = self.block_size
        out, self.output = self.output, None
        recving = set()
        if out is not None:  # the scheduler's update_from_output of the last step
            for rid in out.finished_sending or ():
                self.sent.append(rid)
                r = self.finishing.pop(rid)
                self.blocks.release(r.block_ids)
            recving = out.finished_recving or set()
            self.multi.update_connector_output(out)
            self.events.extend(self.multi.take_events())
        for r in self.running:
            if r.status == WAITING_FOR_REMOTE_KVS and r.request_id in recving:
                r.status = RUNNING
                r.num_computed_tokens = r.remote_computed
                failed = r.load_blocks & (out.invalid_block_ids or set())
                if failed:
                    self._recover(r, failed)
                r.load_blocks = set()
        self._admit()
        batch = [r for r in self.running if r.status == RUNNING]
        work, sched = [], []
        for r in batch:
            n = len(r.prompt_token_ids)
            nc = r.num_computed_tokens
            if nc < n:
                toks, ends, after = r.prompt_token_ids[nc:], self._chunk_ends(nc, n), n
            else:
                toks, ends, after = [r.output_token_ids[-1]], [nc + 1], nc + 1
            work.append((toks, nc, ends, r.block_ids))
            sched.append((r, r.block_ids, after))
        so = self._scheduler_output(sched)
        so.finished_req_ids, self._just_finished = self._just_finished, set()
        meta = pickle.loads(pickle.dumps(self.multi.build_connector_meta(so)))
        self.metas.append(meta)
        # The worker (gpu_model_runner + kv_connector_model_runner_mixin).
        if so.preempted_req_ids:
            self.worker.handle_preemptions(meta)
        self.worker.bind_connector_metadata(meta)
        self.worker.start_load_kv(None)
        logits = self.model.forward(work, self.kv, bs, self.hooks) if batch else []
        if batch:
            self.worker.wait_for_save()  # kv_connector_no_forward: wait_for_save=False
        sending, recving = self.worker.get_finished(so.finished_req_ids)
        errors = self.worker.get_block_ids_with_load_errors()
        out = KVConnectorOutput(
            finished_sending=sending, finished_recving=recving,
            kv_connector_stats=self.worker.get_kv_connector_stats(),
            kv_cache_events=self.worker.get_kv_connector_kv_cache_events(),
            kv_connector_worker_meta=self.worker.build_connector_worker_meta(),
            invalid_block_ids=errors)
        self.worker.clear_connector_metadata()
        self.output = pickle.loads(pickle.dumps(out))
        self.outputs.append(self.output)
        now = time.perf_counter()
        for (r, _, after), lg in zip(sched, logits):
            failed = r.load_blocks & errors
            r.load_blocks = set()
            if failed:
                self._recover(r, failed)
                continue
            r.num_computed_tokens = after
            for i in range(min(after, len(r.prompt_token_ids) - 1) // bs):
                self.blocks.register(r.block_ids[i], r.hashes[i])
            r.output_token_ids.append(int(torch.argmax(lg)))
            r.logits.append(lg)
            if r.first_token_time is None:
                r.first_token_time = now
            if len(r.output_token_ids) >= r.max_tokens:
                self._finish(r, now)
        self.running = [r for r in self.running if r.status != FINISHED]
        if not batch:
            time.sleep(0.001)

    def has_work(self):
        return super().has_work() or self.output is not None and bool(
            self.output.finished_sending)

    def _finish(self, r, now):
        r.status = FINISHED
        self.steps.finished(r.request_id)
        r.finish_time = now
        # vLLM's scheduler: MultiConnector is SupportsHMA -> request_finished_all_groups.
        delay, r.params_out = self.multi.request_finished_all_groups(r, (list(r.block_ids),))
        self._just_finished.add(r.request_id)
        if delay:
            self.finishing[r.request_id] = r
        else:
            self.blocks.release(r.block_ids)

    def run(self, prompts, max_tokens=MAX_TOKENS, params=None):
        reqs = [self.add_request(p, max_tokens) for p in prompts]
        for r in reqs:
            r.kv_transfer_params = dict(params) if params else None
        self.run_until(lambda: not (self.waiting or self.running))
        return reqs

    def run_until(self, done):
        deadline = time.monotonic() + DEADLINE_S
        while not done():
            assert time.monotonic() < deadline, "the engine made no progress"
            self.step()

    def tierkv_stats(self, i=1):
        """tierkv child i's counters (worker + scheduler side, totals)."""
        w, s = self.sub(i).stats.total, self.sub(i, "scheduler").stats.total
        return {k: w[k] + s[k] for k in w}

    def close(self):
        if self._closed:
            return
        self.run_until(lambda: not self.has_work())
        self._closed = True
        self.worker.shutdown()
        self.multi.shutdown()


class _GatedPuts:
    def __init__(self, store):
        self._store = store
        self.gate = threading.Event()

    def batch_put_from(self, *args):
        self.gate.wait()
        return self._store.batch_put_from(*args)

    def __getattr__(self, name):
        return getattr(self._store, name)


@pytest.fixture(params=["real_blocks", "empty_blocks"])
def others_get(request, monkeypatch):
    """vLLM main @ 00f4240 hands non-chosen children the real blocks with 0 tokens; releases
    before it handed them blocks.new_empty(): tierkv must do nothing with either."""
    monkeypatch.setattr(MultiConnector, "OTHERS_GET_EMPTY_BLOCKS",
                        request.param == "empty_blocks")
    return request.param


def _tierkv_loads(engine, i=1):
    return [ld for m in engine.metas for ld in m.metadata[i].loads]


def test_loaded_by_configuration_alone():
    with HeldStore():
        tk_cfg = vllm_kv_config("kv_producer")
        cfg = multi_config("kv_both", p2p_config(), tk_cfg)
        e = MultiEngine(cfg)
        assert type(e.multi) is MultiConnector and type(e.worker) is MultiConnector
        names = [type(c).__name__ for c in e.multi.sub_connectors]
        assert names == ["P2PConnector", "TierkvConnector"]
        assert [type(c).__module__ for c in e.worker.sub_connectors] == [
            "p2p_connector", "tierkv.integrations.vllm"]
        tk = e.sub(1, "scheduler")
        # The child read its own KVTransferConfig (the copy MultiConnector made), not the
        # parent's; the engine_id is the parent's.
        assert tk.kv_role == "kv_producer" and tk._kv_transfer_config.kv_connector == \
            "TierkvConnector"
        assert tk.options.cache_prefix == tk_cfg["kv_connector_extra_config"]["cache_prefix"]
        assert tk._kv_transfer_config.engine_id == e.vllm_config.kv_transfer_config.engine_id
        assert MultiConnector.requires_piecewise_for_cudagraph(
            cfg["kv_connector_extra_config"])  # tierkv hooks every layer
        assert MultiConnector.get_required_kvcache_layout(e.vllm_config) is None
        assert e.worker.get_finished_count() is None
        # any child: the P2P kv_both child is a producer (base default), tierkv never.
        assert [c.requires_kv_delivery for c in e.multi.sub_connectors] == [True, False]
        assert e.multi.requires_kv_delivery
        e.close()
        # The hybrid KV-cache manager on: refused, the P2P double is not SupportsHMA.
        with pytest.raises(AssertionError, match="HMA"):
            MultiEngine(multi_config("kv_both", p2p_config()), hma=True)
        # tierkv alone under MultiConnector supports it.
        MultiEngine(multi_config("kv_both", vllm_kv_config()), hma=True).close()


def test_a_tierkv_hit_is_served_by_tierkv_bitwise(others_get):
    (ref,) = scratch([P])
    with HeldStore():
        cfg = multi_config("kv_both", p2p_config(), vllm_kv_config())
        e1 = MultiEngine(cfg)
        (r1,) = e1.run([P])
        e1.close()
        assert r1.external_hit_tokens == 0 and same(r1, ref)
        assert e1.tierkv_stats()["saved_objects"] == 12
        e2 = MultiEngine(cfg)  # another engine, same tierkv prefix: the P2P child has nothing
        (r2,) = e2.run([P])
        e2.close()
        assert r2.external_hit_tokens == 96 and same(r2, ref)
        assert e2.tierkv_stats()["loaded_blocks"] == 6
        assert e2.tierkv_stats()["load_error_blocks"] == 0
        # tierkv was chosen; the P2P child got the allocation call with 0 tokens.
        p2p = e2.sub(0, "scheduler")
        allocs = [c for c in p2p.calls if c[0] == "update_state_after_alloc"]
        assert len(allocs) == 1 and allocs[0][2] == 0
        assert allocs[0][3] == ([] if others_get == "empty_blocks" else r2.block_ids)
        loads = _tierkv_loads(e2)
        assert len(loads) == 1 and loads[0].groups[0][1] == r2.block_ids[:6]
        assert all(not m.metadata[0].loads for m in e2.metas)
        # Each step's metadata was cleared from every child (and from tierkv's worker).
        assert not any(c.has_connector_metadata() for c in e2.worker.sub_connectors)
        assert e2.sub(1).worker._meta is None


@pytest.mark.parametrize("lookup_async", [False, True])
def test_the_p2p_child_claims_the_hit_and_tierkv_loads_nothing(others_get, lookup_async):
    """XpYd: a prefiller MultiConnector([P2P kv_producer, tierkv kv_both]) and a decoder
    MultiConnector([P2P kv_consumer, tierkv kv_consumer]) sharing a tierkv prefix. The
    decoder's request carries the prefiller's P2P params: the P2P child wins although tierkv
    has the same blocks, tierkv gets its allocation with 0 tokens and loads nothing, and the
    decoder's output is the scratch run's, bitwise. With tierkv's lookup_async, its first
    answer (None) holds the request back although the P2P child has the hit (MultiConnector
    asks every child); once tierkv answers, the P2P child still wins."""
    (ref,) = scratch([P])
    with HeldStore():
        tk = vllm_kv_config()
        prefix = tk["kv_connector_extra_config"]["cache_prefix"]
        pre = MultiEngine(multi_config("kv_producer", p2p_config("kv_producer"), tk))
        (rp,) = pre.run([P], max_tokens=1, params={"do_remote_decode": True})
        params = rp.params_out
        assert params["do_remote_prefill"] and params["remote_num_tokens"] == 96
        assert rp.request_id in pre.finishing  # blocks kept for the decoder (and tierkv)
        pre.run_until(lambda: pre.tierkv_stats()["saved_objects"] == 12)
        dec = MultiEngine(multi_config(
            "kv_consumer", p2p_config("kv_consumer"),
            vllm_kv_config("kv_consumer", cache_prefix=prefix, lookup_async=lookup_async)))
        (rd,) = dec.run([P], params=params)
        assert rd.external_hit_tokens == 96 and same(rd, ref)
        # tierkv looked the prompt up (MultiConnector asks every child) and had it all...
        assert dec.sub(1, "scheduler").stats.total["lookup_hit_tokens"] == 96
        # ...but the P2P child was first: tierkv loaded nothing.
        assert _tierkv_loads(dec) == [] and dec.tierkv_stats()["loaded_blocks"] == 0
        allocs = [c for c in dec.sub(0, "scheduler").calls
                  if c[0] == "update_state_after_alloc"]
        assert [c[:3] for c in allocs] == [("update_state_after_alloc", rd.request_id, 96)]
        asks = [c for c in dec.sub(0, "scheduler").calls if c[0] == "get_num_new_matched_tokens"]
        # The async lookup answers None at least once (more when its thread is slow to
        # finish: a loaded machine), and the request waits that many steps.
        assert len(asks) >= 2 if lookup_async else len(asks) == 1
        assert all(a == asks[0] for a in asks)
        assert dec.sub(1).worker.load_errors() == set()
        stats = [o.kv_connector_stats for o in dec.outputs if o.kv_connector_stats]
        assert [set(s.data) for s in stats] == [{"P2PConnector"}]
        assert stats[0]["P2PConnector"].data == {"transfers": 1, "blocks": 6}
        dec.close()
        # The prefiller frees the request once the decoder read it.
        pre.run_until(lambda: not pre.finishing)
        assert pre.sent == [rp.request_id]
        assert pre.blocks.num_available() == pre.blocks.num_blocks
        pre.close()


def test_request_finished_delays_freeing_while_tierkvs_puts_are_in_flight():
    (ref,) = scratch([P])
    with HeldStore():
        e = MultiEngine(multi_config("kv_both", p2p_config(), vllm_kv_config()))
        gated = _GatedPuts(e.sub(1).worker.store)
        e.sub(1).worker.store = gated
        (r,) = e.run([P])
        assert same(r, ref)
        # Only tierkv delays (the P2P child had no remote decode): no extra count.
        assert r.request_id in e.finishing and r.params_out is None
        assert all(not m.extra_async_saves for m in e.metas)
        for _ in range(5):
            e.step()
        assert r.request_id in e.finishing  # its puts cannot end: the blocks stay
        assert e.blocks.num_available() < e.blocks.num_blocks
        gated.gate.set()
        e.run_until(lambda: not e.finishing)
        assert e.sent == [r.request_id]
        assert e.tierkv_stats()["saved_objects"] == 12
        assert e.blocks.num_available() == e.blocks.num_blocks
        e.close()


@pytest.mark.parametrize("first", ["p2p", "tierkv"])
def test_done_sending_waits_for_every_child_that_delayed(first):
    """Both children delay freeing (the P2P child for its decoder, tierkv for its puts):
    MultiConnector counts one extra async save, ships it to the worker in the next metadata,
    and names the request in finished_sending only when the second child reports it, in
    either order; exactly once."""
    with HeldStore():
        pre = MultiEngine(multi_config("kv_producer", p2p_config("kv_producer"),
                                       vllm_kv_config()))
        gated = _GatedPuts(pre.sub(1).worker.store)
        pre.sub(1).worker.store = gated
        (rp,) = pre.run([P], max_tokens=1, params={"do_remote_decode": True})
        rid = rp.request_id
        pre.step()
        assert [m.extra_async_saves for m in pre.metas if m.extra_async_saves] == [{rid: 1}]
        dec = MultiEngine(multi_config("kv_consumer", p2p_config("kv_consumer"),
                                       vllm_kv_config("kv_consumer")))
        if first == "p2p":
            dec.run([P], max_tokens=1, params=rp.params_out)  # the decoder reads the blocks
            for _ in range(5):
                pre.step()
            assert not pre.sub(0)._sending  # the P2P child reported it...
            assert rid in pre.finishing  # ...but tierkv's puts are still held
            assert pre.worker._extra_async_saves == {}  # the P2P report used up the extra
            gated.gate.set()
        else:
            gated.gate.set()
            pre.run_until(lambda: pre.sub(1).flush(0))
            for _ in range(5):
                pre.step()
            assert rid in pre.finishing  # tierkv done; the decoder has not read yet
            assert pre.worker._extra_async_saves == {}
            dec.run([P], max_tokens=1, params=rp.params_out)
        pre.run_until(lambda: not pre.finishing)
        for _ in range(3):
            pre.step()
        assert pre.sent == [rid]  # once
        sending = [s for o in pre.outputs for s in (o.finished_sending or ())]
        assert sending == [rid]
        assert pre.multi._extra_async_saves == {} and pre.worker._extra_async_saves == {}
        assert pre.blocks.num_available() == pre.blocks.num_blocks
        dec.close()
        pre.close()


def test_a_preemption_mid_save_reaches_tierkv_and_never_stores_wrong_bytes():
    """test_vllm_engine's preemption case through MultiConnector: handle_preemptions hands
    tierkv its own metadata (the preempted ids) before the next step overwrites the freed
    blocks; what tierkv stored is still the preempted request's KV."""
    r_prompt = prompt(3, 100)
    ref_p, ref_r = scratch([P, r_prompt])
    with HeldStore():
        cfg = multi_config("kv_both", p2p_config(), vllm_kv_config())
        e = MultiEngine(cfg, num_blocks=7)  # one request's worth: the next reuses its blocks
        gated = _GatedPuts(e.sub(1).worker.store)
        e.sub(1).worker.store = gated
        seen = []
        orig = e.sub(1).handle_preemptions
        e.sub(1).handle_preemptions = lambda meta: (seen.append(set(meta.preempted_req_ids)),
                                                    orig(meta))
        a = e.add_request(P, MAX_TOKENS)
        e.step()  # a's prefill: gathered into staging, the puts held
        assert a.output_token_ids
        old_blocks = list(a.block_ids)
        e.preempt(a.request_id)
        b = e.add_request(r_prompt, MAX_TOKENS)
        e.waiting.remove(b)
        e.waiting.insert(0, b)
        e.step()
        assert seen == [{a.request_id}]
        assert b.output_token_ids and set(b.block_ids) == set(old_blocks)
        gated.gate.set()
        e.run_until(lambda: not e.has_work())
        assert same(a, ref_p) and same(b, ref_r)
        e.close()
        e2 = MultiEngine(cfg)
        (r,) = e2.run([P])
        e2.close()
        assert r.external_hit_tokens == 96 and r.load_error_blocks == 0 and same(r, ref_p)


def test_get_finished_merges_recving_and_sending_of_the_children():
    """Worker side, by hand: finished_recving is the union; a request counted with an extra
    async save needs two reports; one without needs one."""
    with HeldStore():
        e = MultiEngine(multi_config("kv_both", p2p_config(), vllm_kv_config()))
        p2p, tk = e.worker.sub_connectors
        p2p._recving = {"a"}
        e.worker.bind_connector_metadata(MultiKVConnectorMetadata(
            metadata=(p2p.build_connector_meta(None), e.sub(1, "scheduler")
                      .build_connector_meta(StepBuilder().build([]))),
            extra_async_saves={"x": 1}))
        assert e.worker._extra_async_saves == {"x": 1}
        with tk.worker._lock:
            tk.worker._put_pending.update({"x": 0, "y": 0})
        p2p._sending = {"x"}
        p2p_connector._ENGINES[p2p.engine_id]["read"].add("x")
        sending, recving = e.worker.get_finished({"x", "y"})
        # tierkv reports x and y, the P2P child x: y once (no extra), x after both.
        assert recving == {"a"} and sending == {"x", "y"}
        assert e.worker._extra_async_saves == {}
        e.worker.clear_connector_metadata()
        assert e.worker.get_finished(set()) == (None, None)
        e.close()


def test_stats_pass_through_per_child():
    with HeldStore():
        e = MultiEngine(multi_config("kv_both", p2p_config(), vllm_kv_config()))
        e.run([P])
        e.close()
        stats = [o.kv_connector_stats for o in e.outputs if o.kv_connector_stats is not None]
        assert stats and all(isinstance(s, MultiKVConnectorStats) for s in stats)
        assert all(set(s.data) == {"TierkvConnector"} for s in stats)  # P2P moved nothing
        total = MultiConnector.build_kv_connector_stats()
        for s in stats:  # as vLLM aggregates the steps' stats (same process: objects)
            total.aggregate(MultiConnector.build_kv_connector_stats(data=s.data))
        red = total.reduce()["TierkvConnector"]
        assert red["saved_objects"] == 12 and red["saved_bytes"] > 0
        assert not total.is_empty()


def test_tierkv_events_chain_through_take_events():
    """Scheduler side: what reaches tierkv's update_connector_output comes out of
    MultiConnector.take_events (the children's events chained in order)."""
    with HeldStore():
        e = MultiEngine(multi_config("kv_both", p2p_config(), vllm_kv_config()))
        (r,) = e.run([P])
        e.run_until(lambda: not e.finishing)
        # MultiConnector never asks its children for worker-side events, so tierkv's are
        # still in its worker: take them and hand them over as a forwarding MultiConnector
        # would.
        ev = e.sub(1).get_kv_connector_kv_cache_events()
        if ev is None:  # already forwarded (a MultiConnector or tierkv that carries them)
            events = e.events
        else:
            ev = pickle.loads(pickle.dumps(ev))
            e.multi.update_connector_output(KVConnectorOutput(kv_cache_events=ev))
            events = list(e.multi.take_events())
        assert [type(x) for x in events] == [BlockStored]
        assert events[0].block_hashes == r.block_hashes[:6] and events[0].medium == "tierkv"
        assert list(e.multi.take_events()) == []
        e.close()


def test_tierkv_events_reach_the_scheduler_through_multiconnector():
    with HeldStore():
        e = MultiEngine(multi_config("kv_both", p2p_config(), vllm_kv_config()))
        (r,) = e.run([P])
        e.close()
        stored = [ev for ev in e.events if isinstance(ev, BlockStored)]
        assert [ev.block_hashes for ev in stored] == [r.block_hashes[:6]]


def test_serialized_tierkv_stats_rebuild_in_another_process():
    # The serialized form of a child's stats is its .data dict (as vLLM's tests of
    # MooncakeConnector.build_kv_connector_stats have it).
    data = {"TierkvConnector": {"saved_objects": 12, "saved_bytes": 98304}}
    stats = MultiConnector.build_kv_connector_stats(data=data)
    assert stats["TierkvConnector"].reduce()["saved_objects"] == 12
