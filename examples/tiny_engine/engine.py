"""The tiny engine: a scheduler and a model runner around TinyModel, with tierkv's connector.

One ``step()`` is one engine iteration, as in vLLM:

1. worker side ``get_finished``: free the blocks of finished requests whose saves ended, and
   wake requests whose asynchronous loads ended;
2. scheduler: admit waiting requests — local prefix-cache match, then
   ``get_num_new_matched_tokens`` (tierkv's hit beyond it), allocate blocks,
   ``update_state_after_alloc``;
3. ``build_connector_meta`` → worker ``bind_connector_metadata`` → ``start_load_kv``;
4. forward: per layer ``wait_for_layer_load`` → attention/MLP of every request →
   ``save_kv_layer``; then ``wait_for_save`` and ``clear_connector_metadata``;
5. ``get_block_ids_with_load_errors``: a request with a failed block drops this step's
   result and recomputes from that block (never decodes from unloaded KV); otherwise sample
   (greedy) and, for finished requests, ``request_finished``.
"""

import threading
import time
from dataclasses import dataclass, field

import torch

from tierkv.connector import KVConnector, KVConnectorRole, KVRole, chunk_hashes, parse_config

from .kv_cache import BlockManager
from .model import ModelConfig, TinyModel
from .vllm_shapes import StepBuilder, is_vllm_config, make_connectors

WAITING, WAITING_FOR_REMOTE_KVS, RUNNING, FINISHED = "waiting", "remote", "running", "finished"


@dataclass
class Request:
    request_id: str
    prompt_token_ids: list
    max_tokens: int
    output_token_ids: list = field(default_factory=list)
    logits: list = field(default_factory=list)  # float32 [vocab] per sampled token
    num_computed_tokens: int = 0
    block_ids: list = field(default_factory=list)
    status: str = WAITING
    arrival: float = 0.0
    first_token_time: float = None
    finish_time: float = None
    local_hit_tokens: int = 0
    external_hit_tokens: int = 0
    load_error_blocks: int = 0
    no_external: bool = False  # after a load error: recompute, do not look up again
    load_blocks: set = field(default_factory=set)
    remote_computed: int = 0  # num_computed_tokens once an async load is done
    hashes: list = None
    released: bool = False
    kv_transfer_params: dict = None  # a producer's (vLLM integration): what it stored

    @property
    def block_hashes(self):
        """vLLM's request.block_hashes: one hash (bytes) per full block of the prompt."""
        return [bytes.fromhex(h) for h in self.hashes]

    @property
    def num_tokens(self):
        return len(self.prompt_token_ids) + len(self.output_token_ids)

    @property
    def ttft(self):
        return None if self.first_token_time is None else self.first_token_time - self.arrival


@dataclass
class SchedulerOutput:
    scheduled: list  # (request, block_ids, num_computed_tokens after the step)


class _Hooks:
    def __init__(self, worker, names):
        self.worker, self.names = worker, names

    def before_layer(self, i):
        self.worker.wait_for_layer_load(self.names[i])

    def after_layer(self, i):
        self.worker.save_kv_layer(self.names[i])


class Engine:
    """``model``: a ModelConfig; ``num_blocks`` x ``block_size`` tokens of KV pages, allocated
    once; ``kv_transfer_config``: a dict for tierkv.connector.KVConnector (None: local prefix
    cache only); ``store``: an already set-up tierkv DistributedStore to share (else the config's
    ``store`` dict sets one up). ``threads``: torch intra-op threads (a fixed count keeps the
    arithmetic identical across processes)."""

    def __init__(self, model=None, num_blocks=256, block_size=16, kv_transfer_config=None,
                 store=None, threads=1, max_batch=8):
        if threads:
            torch.set_num_threads(threads)
        self.cfg = model or ModelConfig()
        self.model = TinyModel(self.cfg)
        self.block_size = block_size
        self.kv = self.model.new_kv_cache(num_blocks, block_size)
        self.blocks = BlockManager(num_blocks)
        self.max_batch = max_batch
        self.waiting, self.running, self.finishing = [], [], {}
        self.finished_ids = set()
        self.lock = threading.Lock()  # one step at a time (HTTP server threads)
        self._ids = 0
        self.scheduler = self.worker = None
        self.steps = None  # vLLM-shaped scheduler outputs (the vLLM integration)
        self._preempted = set()  # named in the next step's scheduler output
        self.layer_names = [f"model.layers.{i}.self_attn" for i in range(self.cfg.n_layers)]
        if is_vllm_config(kv_transfer_config):
            # tierkv.integrations.vllm, loaded and driven as vLLM does (vllm_shapes.py).
            self.scheduler, self.worker = make_connectors(
                kv_transfer_config, self.cfg, num_blocks, block_size, self.layer_names)
            self.worker.register_kv_caches(dict(zip(self.layer_names, self.kv)))
            self.role = kv_transfer_config.get("kv_role", "kv_both")
            self.steps = StepBuilder()
        elif kv_transfer_config is not None:
            conf = parse_config(kv_transfer_config)
            kw = dict(model=self.cfg.name, num_layers=self.cfg.n_layers, block_size=block_size,
                      num_kv_heads=self.cfg.n_kv_heads)
            self.scheduler = KVConnector(conf, KVConnectorRole.SCHEDULER, store=store, **kw)
            self.worker = KVConnector(conf, KVConnectorRole.WORKER, store=self.scheduler.store,
                                      **kw)
            self.worker.register_kv_caches(dict(zip(self.layer_names, self.kv)))
            self.role = conf.kv_role
        self.hooks = _Hooks(self.worker, self.layer_names) if self.worker else None

    # ---- requests -------------------------------------------------------------------------

    def add_request(self, prompt_token_ids, max_tokens=16, request_id=None):
        if not prompt_token_ids:
            raise ValueError("empty prompt")
        if len(prompt_token_ids) + max_tokens > self.cfg.max_positions:
            raise ValueError(f"prompt + max_tokens exceeds {self.cfg.max_positions} positions")
        if any(not 0 <= t < self.cfg.vocab_size for t in prompt_token_ids):
            raise ValueError(f"token ids must be in [0, {self.cfg.vocab_size})")
        self._ids += 1
        r = Request(request_id or f"req-{self._ids}", list(prompt_token_ids), max_tokens,
                    arrival=time.perf_counter())
        r.hashes = [h.hex() for h in chunk_hashes(r.prompt_token_ids,
                                                  chunk_size=self.block_size)]
        self.waiting.append(r)
        return r

    def generate(self, prompts, max_tokens=16):
        """Runs the prompts (lists of token ids) to completion; returns their Requests."""
        with self.lock:
            reqs = [self.add_request(p, max_tokens) for p in prompts]
            while self.has_work():
                self.step()
            return reqs

    def has_work(self):
        return bool(self.waiting or self.running or self.finishing)

    # ---- one iteration --------------------------------------------------------------------

    def _chunk_ends(self, start, n):
        """Canonical chunk ends for prompt positions [start, n): block boundaries, then n-1
        (the last prompt token alone)."""
        bs, ends = self.block_size, []
        e = (start // bs + 1) * bs
        while e < n - 1:
            ends.append(e)
            e += bs
        if n - 1 > start:
            ends.append(n - 1)
        ends.append(n)
        return ends

    def _admit(self):
        bs = self.block_size
        while self.waiting and len(self.running) < self.max_batch:
            r = self.waiting[0]
            n = len(r.prompt_token_ids)
            usable = (n - 1) // bs
            local = self.blocks.match_prefix(r.hashes[:usable])
            r.num_computed_tokens = len(local) * bs
            ext, load_async = 0, False
            if (self.scheduler is not None and not r.no_external
                    and self.role != KVRole.PRODUCER):
                ext, load_async = self.scheduler.get_num_new_matched_tokens(
                    r, r.num_computed_tokens)
                if ext is None:  # asynchronous lookup still running
                    self.blocks.release(local)
                    return
            need = (n + r.max_tokens + bs - 1) // bs - len(local)
            new = self.blocks.allocate(need)
            if new is None:
                self.blocks.release(local)
                if not self.running and not self.finishing:
                    raise RuntimeError(f"{r.request_id} needs more KV blocks than exist")
                return
            self.waiting.pop(0)
            r.block_ids = local + new
            if r.output_token_ids == [] and r.first_token_time is None:
                r.local_hit_tokens = r.num_computed_tokens
                r.external_hit_tokens = ext
            if self.scheduler is not None:
                self.scheduler.update_state_after_alloc(r, r.block_ids, ext)
            nc = r.num_computed_tokens
            r.load_blocks = set(r.block_ids[nc // bs:(nc + ext) // bs])
            if ext and load_async:
                r.status = WAITING_FOR_REMOTE_KVS
                r.remote_computed = nc + ext
            else:
                r.num_computed_tokens += ext
                r.status = RUNNING
            self.running.append(r)

    def _recover(self, r, failed):
        """Load errors in r's blocks: recompute from the first failed block."""
        first = min(r.block_ids.index(b) for b in failed)
        r.num_computed_tokens = min(r.num_computed_tokens, first * self.block_size)
        r.load_error_blocks += len(failed)
        r.no_external = True
        r.load_blocks = set()

    def step(self):
        bs = self.block_size
        errors = set()
        if self.worker is not None:
            sending, recving = self.worker.get_finished(set(self.finishing))
            sending, recving = sending or set(), recving or set()  # vLLM's None = nothing
            for rid in sending:
                r = self.finishing.pop(rid)
                self.blocks.release(r.block_ids)
            errors = self.worker.get_block_ids_with_load_errors()
            for r in self.running:
                if r.status == WAITING_FOR_REMOTE_KVS and r.request_id in recving:
                    r.status = RUNNING
                    r.num_computed_tokens = r.remote_computed
                    failed = r.load_blocks & errors
                    if failed:
                        self._recover(r, failed)
                    r.load_blocks = set()
        self._admit()
        batch = [r for r in self.running if r.status == RUNNING]
        if not batch:
            if self.worker is not None:  # asynchronous loads start without a forward step
                meta = self.scheduler.build_connector_meta(self._scheduler_output([]))
                if meta.loads:
                    self.worker.bind_connector_metadata(meta)
                    self.worker.start_load_kv()
                    self.worker.clear_connector_metadata()
            if self.finishing or self.running:
                time.sleep(0.0005)
            return
        work, sched = [], []
        for r in batch:
            n = len(r.prompt_token_ids)
            nc = r.num_computed_tokens
            if nc < n:
                toks = r.prompt_token_ids[nc:]
                ends = self._chunk_ends(nc, n)
                after = n
            else:
                toks = [r.output_token_ids[-1]]
                ends = [nc + 1]
                after = nc + 1
            work.append((toks, nc, ends, r.block_ids))
            sched.append((r, r.block_ids, after))
        if self.worker is not None:
            meta = self.scheduler.build_connector_meta(self._scheduler_output(sched))
            if self.steps is not None:  # vLLM's runner: before anything is written this step
                self.worker.handle_preemptions(meta)
            self.worker.bind_connector_metadata(meta)
            self.worker.start_load_kv()
        logits = self.model.forward(work, self.kv, bs, self.hooks)
        if self.worker is not None:
            self.worker.wait_for_save()
            self.worker.clear_connector_metadata()
            errors |= self.worker.get_block_ids_with_load_errors()
        now = time.perf_counter()
        for (r, _, after), lg in zip(sched, logits):
            failed = r.load_blocks & errors
            r.load_blocks = set()
            if failed:
                self._recover(r, failed)
                continue
            r.num_computed_tokens = after
            # Register the canonically computed full prompt blocks in the local cache.
            for i in range(min(after, len(r.prompt_token_ids) - 1) // bs):
                self.blocks.register(r.block_ids[i], r.hashes[i])
            r.output_token_ids.append(int(torch.argmax(lg)))
            r.logits.append(lg)
            if r.first_token_time is None:
                r.first_token_time = now
            if len(r.output_token_ids) >= r.max_tokens:
                self._finish(r, now)
        self.running = [r for r in self.running if r.status != FINISHED]

    def _scheduler_output(self, sched):
        if self.steps is None:
            return SchedulerOutput(sched)
        preempted, self._preempted = self._preempted, set()
        return self.steps.build(sched, preempted)

    def preempt(self, request_id):
        """vLLM-style preemption (the vLLM integration only): the request's blocks are freed
        at once (another request may take them in the next step) and it starts over from its
        prompt (its output tokens are generated again: greedy, so the same ones); the next
        step's scheduler output names it in ``preempted_req_ids`` and the worker's
        ``handle_preemptions`` runs before that step writes any block."""
        if self.steps is None:
            raise RuntimeError("preempt needs the vLLM integration (kv_connector_module_path)")
        r = next(x for x in self.running if x.request_id == request_id)
        self.running.remove(r)
        self.blocks.release(r.block_ids)
        r.block_ids, r.num_computed_tokens, r.status = [], 0, WAITING
        r.output_token_ids, r.logits, r.first_token_time = [], [], None
        r.load_blocks, r.no_external = set(), False
        self.waiting.insert(0, r)
        self._preempted.add(request_id)

    def connector_stats(self):
        """The worker-side connector's counters (either connector), or {}."""
        if self.worker is None:
            return {}
        st = self.worker.stats
        if not hasattr(st, "total"):
            return dict(st)
        both = dict(st.total)  # the integration counts lookups on the scheduler side
        for k, v in self.scheduler.stats.total.items():
            both[k] += v
        return both

    def _finish(self, r, now):
        r.status = FINISHED
        if self.steps is not None:
            self.steps.finished(r.request_id)
        r.finish_time = now
        delay = False
        if self.scheduler is not None:
            delay, _ = self.scheduler.request_finished(r, r.block_ids)
        if delay:
            self.finishing[r.request_id] = r
        else:
            self.blocks.release(r.block_ids)

    def close(self):
        """Waits for in-flight saves, then closes the connector (idempotent)."""
        with self.lock:
            while self.finishing:
                self.step()
            if self.worker is not None and not getattr(self, "_closed", False):
                self._closed = True
                self.worker.close()
                self.scheduler.close()
