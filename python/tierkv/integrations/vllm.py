"""tierkv's connector for vLLM's V1 KV-connector interface (docs/engine.md, "vLLM").

Load it by configuration::

    --kv-transfer-config '{"kv_connector": "TierkvConnector",
                           "kv_connector_module_path": "tierkv.integrations.vllm",
                           "kv_role": "kv_both", "kv_connector_extra_config": {...}}'

``TierkvConnector`` subclasses vLLM's ``KVConnectorBase_V1`` (and ``SupportsHMA``) when vLLM
is importable; without vLLM it stands alone with the same methods, so the rest of tierkv never
needs vLLM. The scheduler side (``KVConnectorRole.SCHEDULER``) looks prefixes up in the store
and says what each step loads and saves; the worker side (``_vllm_worker.VllmWorker``) moves
the blocks. Keys are built from vLLM's ``request.block_hashes`` (which carry LoRA, multimodal
inputs and ``cache_salt``) under a prefix naming the model, a layout fingerprint, the rank and
the KV-cache group::

    [cache_prefix@]<model>@fp:<fingerprint>@tp_rank:T@pcp0@dcp0@pp_rank:0@group:G
        @layer:<L>@<block hash hex>      one block of one layer (default)
        @all@<block hash hex>            one block of every layer of the group
                                         (enable_cross_layers_blocks)
"""

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from .. import _tierkv
from ..connector import (
    AttentionKind,
    KeyMetadata,
    group_id,
    key_prefix,
    key_tp_rank,
    longest_prefix_hit,
    lookup_namespaces,
    model_name as _model_name,
    tp_replication_factor,
)
from . import _common
from ._vllm_config import engine_facts, layer_index, parse_options
from ._vllm_events import RemovedBlocks, kv_events, removed_events
from ._vllm_worker import VllmWorker

_log = logging.getLogger("tierkv.integrations.vllm")

try:  # vLLM present: the real base classes (the factory may check them)
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorBase_V1 as _Base,
        KVConnectorMetadata as _MetadataBase,
        KVConnectorRole,
    )
    HAVE_VLLM = True
except ImportError:  # standalone: the same names, no vLLM import anywhere in tierkv
    import enum

    HAVE_VLLM = False

    class KVConnectorRole(enum.Enum):
        SCHEDULER = 0
        WORKER = 1

    class _MetadataBase:
        pass

    class _Base:
        def __init__(self, vllm_config, role, kv_cache_config=None):
            self._connector_metadata = None
            self._vllm_config = vllm_config
            self._kv_transfer_config = getattr(vllm_config, "kv_transfer_config", None)
            self._kv_cache_config = kv_cache_config
            self._role = role

        @property
        def role(self):
            return self._role

        def bind_connector_metadata(self, connector_metadata):
            self._connector_metadata = connector_metadata

        def clear_connector_metadata(self):
            self._connector_metadata = None

        def _get_connector_metadata(self):
            return self._connector_metadata

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import SupportsHMA as _HMA
except ImportError:
    class _HMA:
        pass

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.base import (
        KVConnectorWorkerMetadata as _WorkerMetaBase,
    )
except ImportError:
    class _WorkerMetaBase:
        pass

try:
    from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
        KVConnectorStats as _StatsBase,
    )
except ImportError:
    @dataclass
    class _StatsBase:
        data: dict = field(default_factory=dict)


@dataclass
class BlockTransfer:
    """One request's blocks to load or save: per KV-cache group, (group, block ids, hashes)."""

    req_id: str
    groups: list
    is_async: bool = False


@dataclass
class TierkvConnectorMetadata(_MetadataBase):
    loads: list = field(default_factory=list)
    saves: list = field(default_factory=list)
    preempted_req_ids: set = field(default_factory=set)  # handle_preemptions reads these


@dataclass
class TierkvWorkerMetadata(_WorkerMetaBase):
    """A worker's KV events of the step, in ``KVConnectorOutput.kv_connector_worker_meta``:
    vLLM's MultiConnector forwards each child's worker metadata but not
    ``get_kv_connector_kv_cache_events`` (vllm-project/vllm multi_connector.py @ 00f4240)."""

    events: object = None

    def aggregate(self, other):
        """Across TP workers (vLLM's KVOutputAggregator): events stored by every worker."""
        if self.events is None:
            return other
        if getattr(other, "events", None) is not None:
            self.events.merge(other.events)
        return self


_COUNTERS = ("lookups", "lookup_hit_tokens", "loaded_blocks", "load_error_blocks",
             "loaded_bytes", "saved_objects", "saved_bytes", "save_skipped_objects",
             "save_errors", "save_paused_requests", "load_seconds")


@dataclass
class TierkvConnectorStats(_StatsBase):
    """Counters since the last ``get_kv_connector_stats`` (vLLM aggregates them)."""

    def __post_init__(self):
        if not getattr(self, "data", None):
            self.data = {k: 0 for k in _COUNTERS}

    def reset(self):
        self.data = {k: 0 for k in _COUNTERS}

    def aggregate(self, other):
        for k, v in (other.data or {}).items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self):
        return dict(self.data)

    def is_empty(self):
        return not any(self.data.values())


class _Counters:
    def __init__(self):
        self._lock = threading.Lock()
        self.total = {k: 0 for k in _COUNTERS}
        self.since = {k: 0 for k in _COUNTERS}

    def add(self, **kw):
        with self._lock:
            for k, v in kw.items():
                self.total[k] += v
                self.since[k] += v

    def take(self):
        with self._lock:
            out, self.since = self.since, {k: 0 for k in _COUNTERS}
        return out


class _Keys:
    def __init__(self, facts, fingerprint, options):
        self.opt = options
        name = f"{_model_name(facts.model)}@fp:{fingerprint}"
        self.model_key = name
        kind = AttentionKind.MLA if facts.use_mla else AttentionKind.GQA
        heads = max([g.num_kv_heads for g in facts.groups] + [1])
        self.factor = tp_replication_factor(kind, facts.tp_size, heads)
        rank = key_tp_rank(facts.tp_rank, self.factor)
        self.prefix = {}
        self.namespaces = {}
        for g in facts.groups:
            md = KeyMetadata(name, tp_rank=rank, group=g.index, cache_prefix=options.cache_prefix)
            self.prefix[g.index] = key_prefix(md)
            base = KeyMetadata(name, group=g.index, cache_prefix=options.cache_prefix)
            self.namespaces[g.index] = list(lookup_namespaces(base, tp_size=facts.tp_size,
                                                              factor=self.factor))

    def layer_key(self, group, layer, h):
        return f"{self.prefix[group]}@layer:{layer}@{h}"

    def cross_key(self, group, h):
        return f"{self.prefix[group]}@all@{h}"

    def replicate_config(self, hashes):
        cfg = _tierkv.ReplicateConfig()
        if self.opt.group_semantics:
            cfg.group_ids = [group_id(self.opt.cache_prefix, self.model_key, h) for h in hashes]
        if self.opt.preferred_segment:
            cfg.preferred_segment = self.opt.preferred_segment
        return cfg


def _hex(h):
    """A vLLM BlockHash (bytes, or an int in old versions) as hex."""
    if isinstance(h, (bytes, bytearray)):
        return bytes(h).hex()
    if isinstance(h, int):
        return f"{h & ((1 << 128) - 1):032x}"
    return bytes(getattr(h, "hash_value", h)).hex()


def _group_ids(blocks):
    """KVCacheBlocks (get_block_ids() -> tuple of lists per group), or a tuple/list of them."""
    if hasattr(blocks, "get_block_ids"):
        blocks = blocks.get_block_ids()
    if blocks and isinstance(blocks[0], (list, tuple)):
        return [list(g) for g in blocks]
    return [list(blocks or [])]


@dataclass
class _ReqState:
    request: object
    num_computed: int = 0          # get_num_new_matched_tokens' argument
    external: int = 0              # tokens tierkv supplies
    block_ids: list = None         # per group
    saved_blocks: int = 0          # blocks [0, saved_blocks) saved or known stored
    saves_scheduled: bool = False
    wait_until: float = 0.0        # consumer waiting for a producer's blocks
    lookup: object = None          # Future (lookup_async)


class TierkvConnector(_Base, _HMA):
    """vLLM V1 KV connector backed by tierkv (both roles). See the module docstring."""

    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        ktc = getattr(vllm_config, "kv_transfer_config", None)
        extra = getattr(ktc, "kv_connector_extra_config", None) or {}
        self.options = parse_options(extra)
        self.kv_role = str(getattr(ktc, "kv_role", None) or "kv_both")
        if self.kv_role not in ("kv_producer", "kv_consumer", "kv_both"):
            raise ValueError(f"kv_role: {self.kv_role!r} is not kv_producer, kv_consumer or "
                             "kv_both")
        self.facts = engine_facts(vllm_config, kv_cache_config)
        self.facts.tp_rank = _tp_rank(self.facts)
        bad = {g.block_size for g in self.facts.groups} - {self.facts.block_size}
        if bad:
            raise ValueError(f"KV-cache groups with block sizes {sorted(bad)} != the hash "
                             f"block size {self.facts.block_size}: not supported by tierkv")
        self.fingerprint = self.facts.fingerprint(self.options.cross_layers)
        self.keys = _Keys(self.facts, self.fingerprint, self.options)
        setup, source = _common.store_setup_config(self.options.store)
        # Mooncake's VLLM_MOONCAKE_DISK_STAGING_USABLE_RATIO: a load batch fills at most that
        # share of the SSD tier's staging buffer (the store's staging_buffer_size, 1280 MiB by
        # default), so a batch of disk-resident objects never overruns it.
        staging = _common.parse_size("staging_buffer_size",
                                     setup.get("staging_buffer_size", 1280 << 20))
        self.options.load_batch_bytes = max(1, min(
            self.options.load_batch_bytes,
            int(staging * self.options.disk_staging_usable_ratio)))
        self.store = _common.shared_store(setup)
        self.stats = _Counters()
        self._is_scheduler = _role_name(role) == "SCHEDULER"
        self._reqs = {}
        self._pending_loads = []
        self._event_acc = None
        self._group_ns = self._namespaces()  # group -> the key namespaces a hit needs
        self._lookup_ns = [ns for g in sorted(self._group_ns) for ns in self._group_ns[g]]
        self._removed = None
        if self._is_scheduler and _kv_events_enabled(vllm_config):
            opt = self.options
            self._removed = RemovedBlocks(self.store, self._block_keys,
                                          opt.removed_check_interval_s, opt.removed_check_keys,
                                          opt.removed_track_blocks)
        self._lookup_pool = (ThreadPoolExecutor(1, thread_name_prefix="tierkv-lookup")
                             if self.options.lookup_async and self._is_scheduler else None)
        self.worker = None
        if not self._is_scheduler:
            self.worker = VllmWorker(self.store, self.keys, self.options, self.kv_role,
                                     self.stats)
        self._closed = False
        _log.info("tierkv vLLM connector (%s, %s): model %s, layout fingerprint %s, store %s",
                  _role_name(role).lower(), self.kv_role, self.facts.model, self.fingerprint,
                  source)

    # ---- scheduler side -------------------------------------------------------------------

    def _namespaces(self):
        out = {}
        for g in self.facts.groups:
            mine = out[g.index] = []
            for ns in self.keys.namespaces[g.index]:
                if self.options.cross_layers:
                    mine.append(f"{ns}@all")
                else:
                    mine.extend(f"{ns}@layer:{layer_index(n, i)}"
                                for i, n in enumerate(g.layer_names))
        return out

    def _block_keys(self, group, h):
        """Every key a hit on block ``h`` of ``group`` needs (None: of every group)."""
        nss = self._lookup_ns if group is None else self._group_ns.get(group, ())
        return [f"{ns}@{h}" for ns in nss]

    def _lookup(self, hashes, num_tokens):
        bs = self.facts.block_size
        usable = (num_tokens - 1) // bs  # never the block holding the last token
        hit = longest_prefix_hit(self.store, hashes[:usable], self._lookup_ns,
                                 usable * bs, bs)
        return hit.hit_chunks * bs

    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        """(tokens tierkv supplies beyond ``num_computed_tokens``, load asynchronously?);
        ``(None, False)`` while an asynchronous lookup runs or a consumer still waits for the
        blocks its producer named. A store failure is a miss (logged), never a wrong hit."""
        st = self._state(request)
        st.num_computed = num_computed_tokens
        st.external = 0
        if self.kv_role == "kv_producer":
            return 0, False
        rid = request.request_id
        hashes = [_hex(h) for h in (getattr(request, "block_hashes", None) or [])]
        n = int(getattr(request, "num_tokens", 0) or len(getattr(request, "all_token_ids", [])))
        if self._lookup_pool is not None:
            if st.lookup is None:
                st.lookup = self._lookup_pool.submit(self._lookup, hashes, n)
                return None, False
            if not st.lookup.done():
                return None, False
            fut, st.lookup = st.lookup, None
            hit = _miss_on_error(rid, fut.result)
        else:
            hit = _miss_on_error(rid, lambda: self._lookup(hashes, n))
        want = _producer_tokens(request)
        if want and hit < min(want, (n - 1) // self.facts.block_size * self.facts.block_size) \
                and time.monotonic() < st.wait_until:
            return None, False  # the producer's puts may still be landing
        self.stats.add(lookups=1, lookup_hit_tokens=hit)
        ext = max(0, hit - num_computed_tokens)
        st.external = ext
        return ext, bool(ext) and self.options.load_async

    def _state(self, request):
        """The request's state (vLLM calls get_num_new_matched_tokens and
        update_state_after_alloc for every request it schedules from the waiting queue)."""
        st = self._reqs.get(request.request_id)
        if st is None:
            st = self._reqs[request.request_id] = _ReqState(request)
            if _producer_tokens(request):
                st.wait_until = time.monotonic() + self.options.remote_wait_s
        st.request = request
        return st

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        """Records the load of the ``num_external_tokens`` tokens after the
        ``num_computed_tokens`` given to ``get_num_new_matched_tokens`` (vLLM sets
        ``request.num_computed_tokens`` only after this call) into the request's blocks."""
        st = self._state(request)
        if num_external_tokens <= 0:
            return
        bs = self.facts.block_size
        first = st.num_computed // bs
        last = (st.num_computed + num_external_tokens) // bs
        hashes = [_hex(h) for h in request.block_hashes[first:last]]
        groups = []
        for g, ids in zip(self.facts.groups, _group_ids(blocks)):
            part = ids[first:last]
            if len(part) != last - first:
                raise ValueError(f"request {request.request_id}: group {g.index} has "
                                 f"{len(ids)} blocks, the load needs {last}")
            pairs = [(b, h) for b, h in zip(part, hashes) if b != 0 or not _may_skip(g)]
            groups.append((g.index, [b for b, _ in pairs], [h for _, h in pairs]))
        self._pending_loads.append(BlockTransfer(request.request_id, groups,
                                                 self.options.load_async))
        st.saved_blocks = max(st.saved_blocks, last)  # loaded: already stored

    def build_connector_meta(self, scheduler_output):
        """The step's loads (recorded since the last call) and the saves of the blocks this
        step completes: prompt blocks before the block of the last prompt token."""
        meta = TierkvConnectorMetadata(loads=self._pending_loads)
        self._pending_loads = []
        scheduled = getattr(scheduler_output, "num_scheduled_tokens", {}) or {}
        meta.preempted_req_ids = set(getattr(scheduler_output, "preempted_req_ids", None) or ())
        for rid in meta.preempted_req_ids:
            st = self._reqs.get(rid)
            if st is not None:
                st.block_ids = None  # freed; the resumed request gets new blocks
        for new in getattr(scheduler_output, "scheduled_new_reqs", None) or ():
            st = self._reqs.get(new.req_id)
            if st is None:
                continue
            st.block_ids = _group_ids(new.block_ids)
            self._plan_save(meta, st, new.req_id, new.num_computed_tokens,
                            scheduled.get(new.req_id, 0))
        cached = getattr(scheduler_output, "scheduled_cached_reqs", None)
        if cached is not None:
            resumed = _resumed_set(cached)
            for i, rid in enumerate(cached.req_ids):
                st = self._reqs.get(rid)
                if st is None:
                    continue
                new_ids = cached.new_block_ids[i]
                if rid in resumed or st.block_ids is None:
                    if new_ids is not None:
                        st.block_ids = _group_ids(new_ids)
                elif new_ids is not None:
                    for g, ids in enumerate(_group_ids(new_ids)):
                        st.block_ids[g].extend(ids)
                self._plan_save(meta, st, rid, cached.num_computed_tokens[i],
                                scheduled.get(rid, 0))
        return meta

    def _plan_save(self, meta, st, rid, computed_before, num_scheduled):
        if self.kv_role == "kv_consumer" or st.block_ids is None:
            return
        bs = self.facts.block_size
        req = st.request
        prompt = len(getattr(req, "prompt_token_ids", None) or []) or int(
            getattr(req, "num_prompt_tokens", 0))
        hashes = getattr(req, "block_hashes", None) or []
        # The blocks this step completes: before it, blocks were computed (and saved) in
        # earlier steps, hit locally or loaded. A step recomputing blocks (after a preemption
        # or a load error) saves them again: existing keys count as saved, unreadable ones
        # are replaced.
        full = min(computed_before + num_scheduled, prompt - 1, len(hashes) * bs) // bs
        start = computed_before // bs
        if full <= start:
            return
        hx = [_hex(h) for h in hashes[start:full]]
        groups = []
        for g, ids in zip(self.facts.groups, st.block_ids):
            part = ids[start:full]
            if len(part) < full - start:
                return  # the engine holds fewer blocks than computed tokens: nothing sane
            pairs = [(b, h) for b, h in zip(part, hx) if b != 0 or not _may_skip(g)]
            groups.append((g.index, [b for b, _ in pairs], [h for _, h in pairs]))
        meta.saves.append(BlockTransfer(rid, groups))
        st.saved_blocks = max(st.saved_blocks, full)
        st.saves_scheduled = True

    def update_connector_output(self, connector_output):
        """Collects the workers' KV events (vLLM has already merged the workers' outputs):
        from ``kv_cache_events``, or from tierkv's worker metadata when a MultiConnector
        carried them (whichever the worker filled: the other is empty)."""
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        sources = [getattr(connector_output, "kv_cache_events", None)]
        if isinstance(meta, TierkvWorkerMetadata) and meta.events is not None \
                and meta.events.get_all_events():
            sources.append(meta.events)
        for events in sources:
            if events is None:
                continue
            if self._event_acc is None:
                self._event_acc = events
            elif hasattr(self._event_acc, "merge"):
                self._event_acc = self._event_acc.merge(events)
            else:
                self._event_acc.add_events(events.get_all_events())

    def request_finished(self, request, block_ids):
        """(delay_free, kv_transfer_params): the blocks stay until ``get_finished`` reports the
        request in ``done_sending`` when any of its saves was scheduled; a producer names the
        tokens it stored for its consumer."""
        st = self._reqs.pop(request.request_id, None)
        if st is None:
            return False, None
        if st.lookup is not None:
            st.lookup.cancel()
        params = None
        if self.kv_role == "kv_producer" and st.saved_blocks:
            params = {"tierkv_stored_tokens": st.saved_blocks * self.facts.block_size,
                      "tierkv_fingerprint": self.fingerprint}
        return st.saves_scheduled, params

    def request_finished_all_groups(self, request, block_ids):
        return self.request_finished(request, block_ids)

    def take_events(self):
        """The blocks stored by every worker since the last call (BlockStored events) and,
        with vLLM's KV events on, the announced blocks the store no longer holds whole
        (BlockRemoved, found by a background sweep: _vllm_events.RemovedBlocks)."""
        acc, self._event_acc = self._event_acc, None
        events = []
        if acc is not None:
            if hasattr(acc, "aggregate"):
                acc = acc.aggregate()
            events = list(acc.get_all_events())
        if self._removed is not None:
            for e in events:
                hashes, group = _stored_blocks(e)
                if hashes:
                    self._removed.stored(group, hashes)
            events.extend(removed_events(self._removed.take()))
        yield from events

    @property
    def requires_kv_delivery(self):
        return False  # a cache: a preempted request's saves are best effort

    @property
    def prefer_cross_layer_blocks(self):
        return self.options.cross_layers

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config):
        return True  # saves (and layer-wise loads) hook every attention layer

    def get_finished_count(self):
        return None

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config):
        return None

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return TierkvConnectorStats(data=dict(data)) if data is not None else \
            TierkvConnectorStats()

    # ---- worker side ----------------------------------------------------------------------

    def register_kv_caches(self, kv_caches):
        """Per-layer KV tensors ({layer name: tensor}, vLLM's layouts: the block dimension is
        found from the KV-cache config's block count)."""
        groups, indices = {}, {}
        for g in self.facts.groups:
            for i, n in enumerate(g.layer_names):
                groups[n] = g.index
                indices[n] = layer_index(n, i)
        if not groups:  # no KV-cache config (old vLLM): one group, layers in order
            for i, n in enumerate(kv_caches):
                groups[n] = 0
                indices[n] = layer_index(n, i)
                self.facts.groups[0].layer_names.append(n)
        states = [n for g in self.facts.groups if g.is_state for n in g.layer_names]
        nb = getattr(self._kv_cache_config, "num_blocks", None)
        ordered = dict(sorted(kv_caches.items(), key=lambda kv: indices.get(kv[0], 0)))
        self.worker.register(ordered, groups, indices, nb, hookless=states)

    def register_cross_layers_kv_cache(self, kv_cache, attn_backend=None):
        """One tensor holding every layer ([num_blocks, ...] block-first): one object per
        block, loaded and saved whole."""
        names = [n for g in self.facts.groups for n in g.layer_names] or ["all_layers"]
        self.facts.groups[0].layer_names = self.facts.groups[0].layer_names or names
        self.worker.register({"all_layers": kv_cache}, {"all_layers": 0},
                             {"all_layers": 0}, getattr(self._kv_cache_config, "num_blocks",
                                                        None))
        self.worker.single_tensor_names = set(names)

    def bind_connector_metadata(self, connector_metadata):
        super().bind_connector_metadata(connector_metadata)
        if self.worker is not None:
            self.worker.bind(connector_metadata)

    def clear_connector_metadata(self):
        super().clear_connector_metadata()
        if self.worker is not None:
            self.worker.clear()

    def start_load_kv(self, forward_context=None, **kwargs):
        self.worker.start_load()

    def wait_for_layer_load(self, layer_name):
        self.worker.wait_layer(self._tensor_name(layer_name))

    def save_kv_layer(self, layer_name, kv_layer=None, attn_metadata=None, **kwargs):
        name = self._tensor_name(layer_name)
        if name == "all_layers" and layer_name != self._last_layer_name():
            return
        self.worker.save_layer(name)

    def wait_for_save(self):
        self.worker.wait_for_save()

    def handle_preemptions(self, kv_connector_metadata=None, *args, **kwargs):
        """Before the preempted requests' blocks are overwritten: vLLM passes the step's
        connector metadata (older versions: the preempted request ids)."""
        ids = kv_connector_metadata
        if ids is not None and not isinstance(ids, (set, list, tuple, frozenset)):
            ids = getattr(ids, "preempted_req_ids", None)
        self.worker.handle_preemptions(ids)

    def get_finished(self, finished_req_ids):
        return self.worker.get_finished(finished_req_ids)

    def get_block_ids_with_load_errors(self):
        return self.worker.load_errors()

    def get_kv_connector_stats(self):
        data = self.stats.take()
        return None if not any(data.values()) else TierkvConnectorStats(data=data)

    def get_kv_connector_kv_cache_events(self):
        stored = self.worker.take_stored() if self.worker is not None else []
        if not stored:
            return None
        return kv_events(stored, self.facts.block_size)

    def build_connector_worker_meta(self):
        """The step's KV events not yet taken by ``get_kv_connector_kv_cache_events`` (which
        vLLM calls first: without a MultiConnector this is empty). Always an object, so each
        worker counts in the "stored by every worker" aggregation."""
        if self.worker is None:
            return None
        ev = self.get_kv_connector_kv_cache_events()
        return TierkvWorkerMetadata(ev if ev is not None else kv_events([], self.facts.block_size))

    def flush(self, timeout=None):
        """Waits for every queued save (tests, benchmarks)."""
        return self.worker.flush(timeout) if self.worker is not None else True

    def shutdown(self):
        if self._closed:
            return
        self._closed = True
        if self.worker is not None:
            self.worker.close()
        if self._lookup_pool is not None:
            self._lookup_pool.shutdown(wait=True)
        if self._removed is not None:
            self._removed.close()
        _common.release_store(self.store)

    close = shutdown

    def _tensor_name(self, layer_name):
        return "all_layers" if layer_name in self.worker.single_tensor_names else layer_name

    def _last_layer_name(self):
        names = [n for g in self.facts.groups for n in g.layer_names]
        return names[-1] if names else "all_layers"


def _may_skip(group):
    """Whether vLLM may hand its null block (id 0) in this group's block list: sliding-window
    groups (blocks out of the window) and Mamba groups (states no longer needed)."""
    return group.sliding_window != 0 or group.is_state


def _miss_on_error(rid, lookup):
    """A lookup's hit tokens; a store failure is a miss (logged), never a wrong hit."""
    try:
        return lookup()
    except Exception as e:
        _log.warning("tierkv lookup of %s failed: %s", rid, e)
        return 0


def _role_name(role):
    return getattr(role, "name", str(role)).upper().split(".")[-1]


def _tp_rank(facts):
    try:
        from vllm.distributed.parallel_state import get_tensor_model_parallel_rank
        return int(get_tensor_model_parallel_rank())
    except Exception:  # no vLLM, or no parallel state (the scheduler process)
        return facts.tp_rank


def _producer_tokens(request):
    params = getattr(request, "kv_transfer_params", None) or {}
    try:
        return int(params.get("tierkv_stored_tokens", 0))
    except (AttributeError, TypeError, ValueError):
        return 0


def _resumed_set(cached):
    ids = getattr(cached, "resumed_req_ids", None)
    if ids is not None:
        return set(ids)
    flags = getattr(cached, "resumed_from_preemption", None) or []
    return {r for r, f in zip(cached.req_ids, flags) if f}


def _kv_events_enabled(vllm_config):
    """vLLM publishes KV events (``--kv-events-config '{"enable_kv_cache_events": true}'``)."""
    cfg = getattr(vllm_config, "kv_events_config", None)
    return bool(getattr(cfg, "enable_kv_cache_events", False))


def _stored_blocks(event):
    """(block hashes as hex, group or None) of a BlockStored event; ([], None) otherwise."""
    get = event.get if isinstance(event, dict) else (lambda k: getattr(event, k, None))
    kind = event.get("type") if isinstance(event, dict) else type(event).__name__
    if kind != "BlockStored":
        return [], None
    return [_hex(h) for h in get("block_hashes") or ()], get("group_idx")


def _register_with_vllm():
    """Registers TierkvConnector in vLLM's connector registry (when vLLM is importable): vLLM
    rebuilds serialized stats of a MultiConnector's children by name
    (``KVConnectorFactory.get_connector_class_by_name``), which a connector loaded by
    ``kv_connector_module_path`` alone is not under."""
    if not HAVE_VLLM:
        return
    try:
        from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
        if "TierkvConnector" not in getattr(KVConnectorFactory, "_registry", {}):
            KVConnectorFactory.register_connector("TierkvConnector", __name__, "TierkvConnector")
    except Exception as e:  # a vLLM without that registry: loading by module path still works
        _log.debug("tierkv: not registered with vLLM's connector factory: %s", e)


_register_with_vllm()
