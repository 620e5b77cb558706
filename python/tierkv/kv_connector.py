"""tierkv.connector.KVConnector: an engine KV connector in the shape of vLLM's V1 interface.

The split and the meaning of every method follow vLLM's ``KVConnectorBase_V1``
(vllm/distributed/kv_transfer/kv_connector/v1/base.py) without importing vLLM: one instance
runs on the scheduler side (``KVConnectorRole.SCHEDULER``: lookups, what to load and save per
step), one per worker (``KVConnectorRole.WORKER``: the transfers between the engine's paged
KV cache and tierkv). docs/engine.md says which call goes where in a forward step.

Objects: one per (chunk, layer) — the bytes of one engine block of one layer — keyed
``<key_prefix>@layer:<i>@<chunk hash hex>`` where ``key_prefix`` is vLLM's key schema
(``tierkv.connector.key_prefix``); every layer of a chunk shares its group id
(``tierkv.connector.group_id``) when ``enable_group_semantics`` is on, so they are evicted and
removed together. A chunk counts as cached only if every layer of it is present in every rank
namespace (one ``batch_is_exist`` call, in C++: ``longest_prefix_hit``).

Loads are layer-wise: ``start_load_kv`` queues every layer's blocks of the step on a loader
thread, which loads layer 0 first; ``wait_for_layer_load(layer)`` waits for that layer only,
so layer i+1 loads while the engine computes layer i. A block whose load fails in any layer is
reported once by ``get_block_ids_with_load_errors`` (its bytes must be recomputed), never
left silently wrong. Saves run on a saver thread: ``save_kv_layer`` and ``wait_for_save``
never wait for bytes to move; a full store (``NO_AVAILABLE_HANDLE``) stops saving that
request (the rest of its blocks are skipped, counted in ``stats``) instead of failing it; the
engine frees a request's blocks only once ``get_finished`` lists it in ``done_sending``.

Thread-safety: scheduler-side methods are called from one scheduler thread, worker-side ones
from one worker thread (as vLLM does); ``stats`` may be read from any thread.
"""

import enum
import json
import logging
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from . import _tierkv
from ._tierkv.connector import (
    AttentionKind,
    KeyMetadata,
    chunk_hashes,
    group_id,
    key_prefix,
    key_tp_rank,
    longest_prefix_hit,
    lookup_namespaces,
    model_name as _model_name,
    parse_extra_config,
    tp_replication_factor,
)

_log = logging.getLogger("tierkv.connector")

_OBJECT_ALREADY_EXISTS = -705
_NO_AVAILABLE_HANDLE = -200
_OBJECT_NOT_FOUND = -704


class KVConnectorRole(enum.IntEnum):
    """vLLM's roles of a connector instance."""

    SCHEDULER = 0
    WORKER = 1


class KVRole(str, enum.Enum):
    """``kv_role`` of the transfer config: what this engine does with tierkv."""

    PRODUCER = "kv_producer"  # stores only (a prefill node)
    CONSUMER = "kv_consumer"  # loads only (a decode node)
    BOTH = "kv_both"


class KVConnectorMetadata:
    """vLLM's base class of what the scheduler side hands the workers each step."""


@dataclass
class LoadSpec:
    """Blocks of one request to load in this step: block_ids[i] gets chunk chunk_hashes[i]."""

    request_id: str
    block_ids: list
    chunk_hashes: list
    async_load: bool = False  # vLLM's load_async: the request waits outside forward steps


@dataclass
class SaveSpec:
    """Full blocks of one request whose KV is complete after this step, to store."""

    request_id: str
    block_ids: list
    chunk_hashes: list


@dataclass
class TierkvConnectorMetadata(KVConnectorMetadata):
    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)


# The keys of kv_connector_extra_config this connector understands; any other is an error.
_EXTRA_KEYS = {
    "cache_prefix",
    "enable_group_semantics",
    "load_async",
    "lookup_async",
    "chunk_size",
    "hash_algorithm",
    "store",
}
_TOP_KEYS = {"kv_connector", "kv_role", "kv_connector_extra_config", "engine_id", "kv_rank"}


@dataclass
class ConnectorConfig:
    """The parsed transfer config (``KVConnector.parse_config``)."""

    kv_role: KVRole
    cache_prefix: str
    enable_group_semantics: bool
    load_async: bool
    lookup_async: bool
    chunk_size: int
    hash_algorithm: str
    store: dict  # DistributedStore.setup(dict) arguments; {} = the caller passes a store


def parse_config(config):
    """Parses a kv-transfer-config-like dict (or JSON text) strictly.

    ``{"kv_connector": "TierkvConnector", "kv_role": "kv_both",
    "kv_connector_extra_config": {...}}``. Unknown keys at either level, a ``kv_role`` other
    than the three, a boolean that is not JSON true/false or "true"/"false" (any case), a
    ``chunk_size`` that is not a positive integer, or a ``hash_algorithm`` other than
    ``sha256``/``xxh3_128`` raise ``ValueError`` naming the key.
    """
    if isinstance(config, str):
        config = json.loads(config)
    if not isinstance(config, dict):
        raise ValueError("kv transfer config must be a JSON object")
    unknown = set(config) - _TOP_KEYS
    if unknown:
        raise ValueError(f"kv transfer config: unknown key(s) {sorted(unknown)}")
    kc = config.get("kv_connector", "TierkvConnector")
    if kc != "TierkvConnector":
        raise ValueError(f"kv_connector: {kc!r} is not TierkvConnector")
    try:
        role = KVRole(config.get("kv_role", "kv_both"))
    except ValueError:
        raise ValueError(
            f"kv_role: {config.get('kv_role')!r} is not kv_producer, kv_consumer or kv_both"
        ) from None
    extra = config.get("kv_connector_extra_config", {})
    if not isinstance(extra, dict):
        raise ValueError("kv_connector_extra_config must be a JSON object")
    unknown = set(extra) - _EXTRA_KEYS
    if unknown:
        raise ValueError(f"kv_connector_extra_config: unknown key(s) {sorted(unknown)}")
    # The four shared keys go through the C++ parser (one strict rule for every engine).
    shared = {k: extra[k] for k in ("cache_prefix", "enable_group_semantics", "load_async",
                                    "lookup_async") if k in extra}
    ec = parse_extra_config(shared)
    chunk = extra.get("chunk_size", 256)
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk <= 0:
        raise ValueError(f"chunk_size: {chunk!r} is not a positive integer")
    algo = extra.get("hash_algorithm", "sha256")
    if algo not in ("sha256", "xxh3_128"):
        raise ValueError(f"hash_algorithm: {algo!r} is not sha256 or xxh3_128")
    store = extra.get("store", {})
    if not isinstance(store, dict):
        raise ValueError("store: must be a JSON object of DistributedStore.setup keys")
    return ConnectorConfig(role, ec.cache_prefix, ec.enable_group_semantics, ec.load_async,
                           ec.lookup_async, chunk, algo, dict(store))


def _block_ids(blocks):
    """vLLM passes KVCacheBlocks (get_block_ids() -> tuple of lists); plain lists work too."""
    if hasattr(blocks, "get_block_ids"):
        ids = blocks.get_block_ids()
        return list(ids[0]) if ids and isinstance(ids[0], (list, tuple)) else list(ids)
    return list(blocks)


def _tokens(request):
    for name in ("prompt_token_ids", "all_token_ids"):
        t = getattr(request, name, None)
        if t is not None:
            return list(t)
    raise TypeError("request has neither prompt_token_ids nor all_token_ids")


class _Job:
    """One layer-wise load of a step: per layer, an event set when that layer is done."""

    def __init__(self, specs, num_layers):
        self.specs = specs
        self.layer_done = [threading.Event() for _ in range(num_layers)]
        self.failed_blocks = set()  # guarded by the GIL (set.add/update are atomic)
        self.failed_requests = set()  # set when the last layer is done
        self.started = time.perf_counter()  # start_load_kv
        self.seconds = 0.0                  # until the last layer landed

    def finish(self):
        for spec in self.specs:
            if self.failed_blocks.intersection(spec.block_ids):
                self.failed_requests.add(spec.request_id)
        self.seconds = time.perf_counter() - self.started
        for ev in self.layer_done:
            ev.set()


class KVConnector:
    """tierkv's engine connector (vLLM ``KVConnectorBase_V1``'s methods and meanings).

    ``config``: a kv-transfer-config-like dict (``parse_config``). ``role``: scheduler or
    worker side. ``model``: the model name or path (keys carry its last component);
    ``num_layers``: the engine's attention layers (each is one object per chunk);
    ``block_size``: tokens per engine block, which must equal ``chunk_size``. ``store``: a
    set-up ``DistributedStore`` to use (shared by both sides of one process); when None, one
    is set up from the config's ``store`` dict and closed by ``close()``. ``tp_rank``,
    ``tp_size``, ``num_kv_heads`` give the key's rank (GQA replication rule).

    Raises ``ValueError`` for a bad config or mismatched sizes, ``RuntimeError`` when the
    store cannot be set up.
    """

    def __init__(self, config, role, *, model, num_layers, block_size, store=None,
                 tp_rank=0, tp_size=1, num_kv_heads=1):
        self.config = config if isinstance(config, ConnectorConfig) else parse_config(config)
        self.role = KVConnectorRole(role)
        if block_size != self.config.chunk_size:
            raise ValueError(f"block_size {block_size} != chunk_size {self.config.chunk_size}: "
                             "one tierkv object holds one engine block")
        if num_layers < 1:
            raise ValueError("num_layers must be >= 1")
        self.block_size = block_size
        self.num_layers = num_layers
        self._own_store = store is None
        if store is None:
            if not self.config.store:
                raise ValueError("no store given and no 'store' in kv_connector_extra_config")
            store = _tierkv.DistributedStore()
            rc = store.setup(self.config.store)
            if rc != 0:
                raise RuntimeError(f"tierkv store setup failed: {_tierkv.strerror(rc)}: "
                                   f"{store.last_error()}")
        self.store = store
        factor = tp_replication_factor(AttentionKind.GQA, tp_size, num_kv_heads)
        self.model_name = _model_name(model)
        md = KeyMetadata(self.model_name, tp_rank=key_tp_rank(tp_rank, factor),
                         cache_prefix=self.config.cache_prefix)
        base = KeyMetadata(self.model_name, cache_prefix=self.config.cache_prefix)
        # Per-layer namespaces: a chunk is loadable only if each layer's object is present in
        # every rank namespace.
        self._lookup_ns = [f"{ns}@layer:{i}" for ns in
                           lookup_namespaces(base, tp_size=tp_size, factor=factor)
                           for i in range(num_layers)]
        self._prefix = key_prefix(md)
        self.stats = {"lookups": 0, "lookup_hit_tokens": 0, "loaded_blocks": 0,
                      "load_error_blocks": 0, "saved_objects": 0, "save_skipped_objects": 0,
                      "save_errors": 0, "save_paused_requests": 0, "loaded_bytes": 0,
                      "saved_bytes": 0, "load_seconds": 0.0}
        self._stats_lock = threading.Lock()
        # Scheduler side.
        self._hashes = {}        # request id -> list of chunk hash hex
        self._lookups = {}       # request id -> Future of hit tokens (lookup_async)
        self._pending_loads = []  # LoadSpec made by update_state_after_alloc
        self._saved_upto = {}    # request id -> blocks already scheduled for saving
        self._lookup_pool = (ThreadPoolExecutor(1, thread_name_prefix="tierkv-lookup")
                             if self.config.lookup_async else None)
        # Worker side.
        self._layers = {}        # layer name -> index
        self._layer_base = []    # per layer: (data_ptr, block_bytes)
        self._meta = None
        self._job = None         # the current step's layer-wise load
        self._errors = set()
        self._errors_lock = threading.Lock()
        self._async_loads = {}   # request id -> _Job (load_async requests)
        self._save_pending = {}  # request id -> outstanding save batches
        self._save_lock = threading.Condition()
        self._paused = set()     # requests whose saves stopped (store full)
        self._finished_wanted = set()
        self._step_saves = {}    # layer index -> list of (key, ptr, size, group, request)
        self._registered = []
        # Keys present in the store whose load failed (a checksum mismatch, a short object):
        # the next save of that chunk replaces them (upsert) with the recomputed bytes.
        self._bad_keys = set()
        self._load_q = queue.Queue()
        self._save_q = queue.Queue()
        self._threads = []
        self._closed = False
        #: Test hook: called on the loader thread before each layer's batch (layer index).
        self.before_layer_load = None
        if self.role == KVConnectorRole.WORKER:
            for target, name in ((self._load_loop, "tierkv-load"),
                                 (self._save_loop, "tierkv-save")):
                t = threading.Thread(target=target, name=name, daemon=True)
                t.start()
                self._threads.append(t)

    # ---- keys -----------------------------------------------------------------------------

    def key(self, layer, chunk_hash_hex):
        return f"{self._prefix}@layer:{layer}@{chunk_hash_hex}"

    def chunk_hashes_hex(self, tokens):
        return [h.hex() for h in chunk_hashes(tokens, chunk_size=self.block_size,
                                              algorithm=self.config.hash_algorithm)]

    def _request_hashes(self, request):
        rid = request.request_id
        h = self._hashes.get(rid)
        if h is None:
            h = self.chunk_hashes_hex(_tokens(request))
            self._hashes[rid] = h
        return h

    def _count(self, **kw):
        with self._stats_lock:
            for k, v in kw.items():
                self.stats[k] += v

    # ---- scheduler side -------------------------------------------------------------------

    def _lookup(self, hashes, num_tokens):
        hit = longest_prefix_hit(self.store, hashes, self._lookup_ns, num_tokens,
                                 self.block_size)
        # Whole blocks only, and never the block holding the last prompt token: the engine
        # recomputes that token to sample from it, and loaded blocks must be ones it would
        # have computed alike (docs/engine.md, "Bitwise identity").
        usable = (num_tokens - 1) // self.block_size * self.block_size
        return min(hit.hit_chunks * self.block_size, usable)

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """Tokens beyond ``num_computed_tokens`` (the engine's own prefix-cache hit) that
        tierkv can supply, and whether they load asynchronously (vLLM's ``load_async``: the
        request waits outside forward steps until ``get_finished`` lists it in
        ``done_recving``). ``(None, False)`` while an asynchronous lookup (``lookup_async``) is
        still running: ask again next step. A producer never loads: ``(0, False)``. Store
        errors count as misses (logged). Side-effect free apart from caching the lookup."""
        if self.config.kv_role == KVRole.PRODUCER:
            return 0, False
        hashes = self._request_hashes(request)
        n = len(_tokens(request))
        rid = request.request_id
        if self._lookup_pool is not None:
            fut = self._lookups.get(rid)
            if fut is None:
                self._lookups[rid] = self._lookup_pool.submit(self._lookup, hashes, n)
                return None, False
            if not fut.done():
                return None, False
            try:
                hit = fut.result()
            except Exception as e:  # a store failure is a miss, never a wrong hit
                _log.warning("tierkv lookup of %s failed: %s", rid, e)
                hit = 0
        else:
            try:
                hit = self._lookup(hashes, n)
            except Exception as e:
                _log.warning("tierkv lookup of %s failed: %s", rid, e)
                hit = 0
        self._count(lookups=1, lookup_hit_tokens=hit)
        ext = max(0, hit - num_computed_tokens)
        return ext, bool(ext) and self.config.load_async

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        """After the engine allocated the request's blocks (``blocks``: its block ids in
        order, or vLLM's KVCacheBlocks): remembers the load of the ``num_external_tokens``
        tokens after ``request.num_computed_tokens`` into those blocks, for the next
        ``build_connector_meta``."""
        self._lookups.pop(request.request_id, None)
        if num_external_tokens <= 0:
            return
        ids = _block_ids(blocks)
        first = request.num_computed_tokens // self.block_size
        last = (request.num_computed_tokens + num_external_tokens) // self.block_size
        hashes = self._request_hashes(request)
        self._pending_loads.append(LoadSpec(request.request_id, ids[first:last],
                                            hashes[first:last], self.config.load_async))

    def build_connector_meta(self, scheduler_output):
        """The step's ``TierkvConnectorMetadata``: the loads recorded since the last call, and
        the saves of blocks that become full in this step. ``scheduler_output`` has
        ``scheduled``: a list of (request, block_ids, num_computed_tokens_after_step). A block
        is saved once, if it lies wholly in the prompt before its last token (that token's
        KV is computed in the sampling step)."""
        meta = TierkvConnectorMetadata(loads=self._pending_loads)
        self._pending_loads = []
        if self.config.kv_role == KVRole.CONSUMER:
            return meta
        for request, block_ids, computed_after in scheduler_output.scheduled:
            rid = request.request_id
            n = len(_tokens(request))
            full = min(computed_after, n - 1) // self.block_size
            # Blocks before the step's start were computed (or loaded) already; after a load
            # error the engine rolls num_computed_tokens back, and those blocks are saved
            # again once recomputed.
            start = request.num_computed_tokens // self.block_size
            done = min(self._saved_upto.get(rid, start), start)
            if full > done:
                hashes = self._request_hashes(request)
                ids = _block_ids(block_ids)
                meta.saves.append(SaveSpec(rid, ids[done:full], hashes[done:full]))
                self._saved_upto[rid] = full
        return meta

    def request_finished(self, request, block_ids):
        """Called once when a request finishes. Returns ``(delay_free, params)``:
        ``delay_free`` is True when saves of its blocks may still be in flight — the engine
        must keep the blocks until ``get_finished`` reports it in ``done_sending``;
        ``params`` (a producer's, for the decode side) names what was stored."""
        rid = request.request_id
        saved = self._saved_upto.pop(rid, 0)
        self._hashes.pop(rid, None)
        self._lookups.pop(rid, None)
        params = None
        if self.config.kv_role == KVRole.PRODUCER:
            params = {"cache_prefix": self.config.cache_prefix, "model": self.model_name,
                      "num_saved_tokens": saved * self.block_size}
        return saved > 0, params

    # ---- worker side ----------------------------------------------------------------------

    def register_kv_caches(self, kv_caches):
        """Registers each layer's KV tensor with the store once (zero-copy transfers).
        ``kv_caches``: ``{layer_name: tensor}`` in layer order; each a contiguous CPU tensor
        whose first dimension is the block index (block b = ``tensor[b]``, contiguous).
        Raises ``ValueError`` for a wrong count or layout, ``RuntimeError`` if registration
        fails. The tensors must outlive the connector (``close`` unregisters them)."""
        if len(kv_caches) != self.num_layers:
            raise ValueError(f"{len(kv_caches)} KV caches for {self.num_layers} layers")
        for i, (name, t) in enumerate(kv_caches.items()):
            if t.device.type != "cpu" or not t.is_contiguous():
                raise ValueError(f"KV cache {name}: must be a contiguous CPU tensor")
            block_bytes = t[0].numel() * t.element_size()
            ptr = t.data_ptr()
            rc = self.store.register_buffer(ptr, t.numel() * t.element_size())
            if rc != 0:
                raise RuntimeError(f"register_buffer({name}) failed: {_tierkv.strerror(rc)}")
            self._registered.append(ptr)
            self._layers[name] = i
            self._layer_base.append((ptr, block_bytes))

    def _layer_index(self, layer):
        return layer if isinstance(layer, int) else self._layers[layer]

    def bind_connector_metadata(self, metadata):
        self._meta = metadata

    def clear_connector_metadata(self):
        self._meta = None
        self._job = None

    def _get_connector_metadata(self):
        return self._meta

    def start_load_kv(self, forward_context=None, **kwargs):
        """Starts loading every layer of the step's loads (layer 0 first) and returns at once.
        Layer-wise loads are waited for by ``wait_for_layer_load``; ``load_async`` loads by
        ``get_finished``'s ``done_recving``."""
        meta = self._meta
        if meta is None or not meta.loads:
            return
        sync = [s for s in meta.loads if not s.async_load]
        for spec in meta.loads:
            if spec.async_load:
                job = _Job([spec], self.num_layers)
                self._async_loads[spec.request_id] = job
                self._load_q.put(job)
        if sync:
            self._job = _Job(sync, self.num_layers)
            self._load_q.put(self._job)

    def wait_for_layer_load(self, layer_name):
        """Blocks until this step's layer-wise loads of that layer have landed (or failed:
        failures go to ``get_block_ids_with_load_errors``). Returns at once without loads."""
        job = self._job
        if job is not None:
            job.layer_done[self._layer_index(layer_name)].wait()

    def save_kv_layer(self, layer_name, kv_layer=None, attn_metadata=None, **kwargs):
        """Queues the save of this layer's blocks that the step completed; never waits for
        the bytes (the saver thread puts them while later layers compute)."""
        meta = self._meta
        if meta is None or not meta.saves or self.config.kv_role == KVRole.CONSUMER:
            return
        layer = self._layer_index(layer_name)
        ptr, bb = self._layer_base[layer]
        batch = []
        for spec in meta.saves:
            for b, h in zip(spec.block_ids, spec.chunk_hashes):
                gid = (group_id(self.config.cache_prefix, self.model_name, h)
                       if self.config.enable_group_semantics else "")
                batch.append((self.key(layer, h), ptr + b * bb, bb, gid, spec.request_id))
        with self._save_lock:
            for spec in meta.saves:
                self._save_pending[spec.request_id] = self._save_pending.get(
                    spec.request_id, 0) + 1
        # A request whose load in this step fails computed its blocks from missing KV: the
        # saver waits for the step's load and drops that request's saves.
        self._save_q.put((self._job, batch))

    def wait_for_save(self):
        """End of the forward step: every save of the step is queued by now; returns without
        waiting for bytes (saves never block a step; ``flush`` waits)."""

    def flush(self, timeout=None):
        """Waits until every queued save has finished (shutdown, tests, benchmarks). Returns
        False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._save_lock:
            while any(self._save_pending.values()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._save_lock.wait(left)
        return True

    def get_finished(self, finished_req_ids):
        """``(done_sending, done_recving)``: requests (among those ever passed here as
        finished) whose saves have all ended, and ``load_async`` requests whose loads have
        ended (failed blocks are in ``get_block_ids_with_load_errors``)."""
        self._finished_wanted.update(finished_req_ids)
        sending = set()
        with self._save_lock:
            for rid in list(self._finished_wanted):
                if not self._save_pending.get(rid):
                    self._save_pending.pop(rid, None)
                    self._paused.discard(rid)
                    self._finished_wanted.discard(rid)
                    sending.add(rid)
        recving = set()
        for rid, job in list(self._async_loads.items()):
            if job.layer_done[-1].is_set():
                recving.add(rid)
                del self._async_loads[rid]
        return sending, recving

    def get_block_ids_with_load_errors(self):
        """Block ids whose load failed since the last call (each reported once): their KV is
        not valid and must be recomputed."""
        with self._errors_lock:
            out, self._errors = self._errors, set()
        return out

    def close(self):
        """Waits for saves, stops the threads, unregisters the KV caches and, if the connector
        set its store up, closes it. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.role == KVConnectorRole.WORKER:
            self.flush()
            self._load_q.put(None)
            self._save_q.put(None)
            for t in self._threads:
                t.join()
        for ptr in self._registered:
            self.store.unregister_buffer(ptr)
        self._registered = []
        if self._lookup_pool is not None:
            self._lookup_pool.shutdown(wait=True)
        if self._own_store:
            self.store.close()

    # ---- threads --------------------------------------------------------------------------

    def _load_loop(self):
        while True:
            job = self._load_q.get()
            if job is None:
                return
            try:
                self._run_load(job)
            except Exception as e:  # never leave a waiter hanging
                _log.error("tierkv load failed: %s", e)
                for spec in job.specs:
                    job.failed_blocks.update(spec.block_ids)
            finally:
                with self._errors_lock:
                    self._errors.update(job.failed_blocks)
                job.finish()
                self._count(load_seconds=job.seconds)

    def _run_load(self, job):
        pairs = [(b, h) for spec in job.specs for b, h in zip(spec.block_ids, spec.chunk_hashes)]
        for layer in range(self.num_layers):
            if self.before_layer_load is not None:
                self.before_layer_load(layer)
            ptr, bb = self._layer_base[layer]
            todo = [(b, h) for b, h in pairs if b not in job.failed_blocks]
            while todo:
                # A batch names each key once: two requests sharing a prefix load it into
                # their own blocks in successive batches.
                seen, batch, rest = set(), [], []
                for b, h in todo:
                    (rest if h in seen else batch).append((b, h))
                    seen.add(h)
                keys = [self.key(layer, h) for _, h in batch]
                got = self.store.batch_get_into(keys, [ptr + b * bb for b, _ in batch],
                                                [bb] * len(batch))
                ok = 0
                for (b, _), g, k in zip(batch, got, keys):
                    if g == bb:
                        ok += 1
                    else:
                        job.failed_blocks.add(b)
                        if g != _OBJECT_NOT_FOUND:
                            self._bad_keys.add(k)
                self._count(loaded_bytes=ok * bb)
                todo = rest
            if job.failed_blocks:
                with self._errors_lock:
                    self._errors.update(job.failed_blocks)
            if layer < self.num_layers - 1:  # the last one is set by finish()
                job.layer_done[layer].set()
        self._count(loaded_blocks=len(pairs) - len(job.failed_blocks),
                    load_error_blocks=len(job.failed_blocks))

    def _save_loop(self):
        while True:
            item = self._save_q.get()
            if item is None:
                return
            job, batch = item
            reqs = {r for *_, r in batch}
            try:
                if job is not None:
                    job.layer_done[-1].wait()
                    dropped = [b for b in batch if b[4] in job.failed_requests]
                    if dropped:
                        self._count(save_skipped_objects=len(dropped))
                        batch = [b for b in batch if b[4] not in job.failed_requests]
                self._run_save(batch)
            except Exception as e:
                _log.error("tierkv save failed: %s", e)
                self._count(save_errors=len(batch))
            finally:
                with self._save_lock:
                    for r in reqs:
                        self._save_pending[r] -= 1
                    self._save_lock.notify_all()

    def _run_save(self, batch):
        todo, seen = [], set()
        for item in batch:  # each key once per batch (requests sharing a prefix)
            if item[4] not in self._paused and item[0] not in seen:
                todo.append(item)
                seen.add(item[0])
        self._count(save_skipped_objects=len(batch) - len(todo))
        if not todo:
            return
        codes = [0] * len(todo)
        for upsert in (False, True):
            idx = [i for i, it in enumerate(todo) if (it[0] in self._bad_keys) == upsert]
            if not idx:
                continue
            cfg = _tierkv.ReplicateConfig()
            if self.config.enable_group_semantics:
                cfg.group_ids = [todo[i][3] for i in idx]
            call = self.store.batch_upsert_from if upsert else self.store.batch_put_from
            got = call([todo[i][0] for i in idx], [todo[i][1] for i in idx],
                       [todo[i][2] for i in idx], cfg)
            for i, rc in zip(idx, got):
                codes[i] = rc
                if upsert and rc == 0:
                    self._bad_keys.discard(todo[i][0])
        saved = errors = 0
        for item, rc in zip(todo, codes):
            if rc == 0 or rc == _OBJECT_ALREADY_EXISTS:
                saved += 1
            elif rc == _NO_AVAILABLE_HANDLE:
                if item[4] not in self._paused:
                    self._paused.add(item[4])
                    self._count(save_paused_requests=1)
                self._count(save_skipped_objects=1)
            else:
                errors += 1
        if errors:
            _log.warning("tierkv: %d block saves failed", errors)
        self._count(saved_objects=saved, save_errors=errors, saved_bytes=saved * todo[0][2])
