"""tierkv as SGLang's HiCache storage backend (docs/engine.md, "SGLang").

Load it by configuration::

    --hicache-storage-backend dynamic --hicache-storage-backend-extra-config
    '{"backend_name": "tierkv", "module_path": "tierkv.integrations.sglang",
      "class_name": "TierkvHiCacheStorage"}'

With no ``master_server_address`` (and no store config in the environment) it runs an
embedded store (an in-process master); with one it joins that master.

One object per page: the page's K bytes then its V bytes (MHA) or its latent KV (MLA), in the
host pool's layout order, read and written zero-copy between the registered host pool and the
store (``batch_get_v1`` / ``batch_set_v1``). ``get``/``set`` move the same bytes through the
flat page tensors SGLang hands them, so both paths read each other's objects. The Ascend MLA
layout ``page_first_kv_split`` stores K, V (and the indexer K and scale, if any) of a page one
after the other in its object (zero-copy path only, as in SGLang). Keys::

    [cache_prefix@]sglang@<model>@fp:<fingerprint>@<page key>[@tp<rank>]@pp<rank>

``tp<rank>`` is left out for MLA models: every TP rank holds the same latent KV, so one copy
serves all (rank 0 writes it). The fingerprint covers the model, dtype, page size, layout,
layers, KV heads, head size and the TP/PP/CP placement (``_common.layout_fingerprint``).

Hybrid models (SGLang's ``HybridCacheController``: Mamba state, SWA, DSA indexer pools
registered through ``register_mem_host_pool_v2``) store a page of each side pool as its own
object, ``<page key>.<pool>.<pool fingerprint>`` in the same key scheme (the KV page keeps the
bare key, as in SGLang's file and Mooncake backends); ``batch_exists_v2`` / ``batch_get_v2`` /
``batch_set_v2`` follow SGLang's pool hit policies (``_sglang_v2``).
"""

import logging
import re
import time

import torch

from .. import _tierkv
from ..connector import model_name as _model_name
from . import _common
from . import _sglang_pools as _pools
from ._sglang_v2 import HybridPoolsMixin

_log = logging.getLogger("tierkv.integrations.sglang")

try:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
    HAVE_SGLANG = True
except ImportError:  # standalone: the same methods, no SGLang import anywhere in tierkv
    HAVE_SGLANG = False

    class _Base:
        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host


# Keys of the extra config this backend reads; the factory's own keys are accepted too.
_FACTORY_KEYS = {"backend_name", "module_path", "class_name", "interface_v1"}
_OWN_KEYS = {"master_server_address", "store", "cache_prefix", "enable_group_semantics"}
# Mooncake's backend reads these store settings from the same extra config: taken as store
# setup keys, so a Mooncake configuration works unchanged.
_STORE_KEYS = {"local_hostname", "metadata_server", "protocol", "device_name",
               "global_segment_size", "local_buffer_size"}


class TierkvHiCacheStorage(HybridPoolsMixin, _Base):
    """SGLang ``HiCacheStorage`` backed by tierkv. ``storage_config``: SGLang's
    ``HiCacheStorageConfig`` (tp/pp ranks and sizes, is_mla_model, model_name, extra_config);
    ``kwargs``: what SGLang's factory passes beside it (unused)."""

    def __init__(self, storage_config=None, kwargs=None, **more):
        self.config = storage_config
        extra = dict(_common.field_of(storage_config, "extra_config", None) or {})
        unknown = set(extra) - _FACTORY_KEYS - _OWN_KEYS - _STORE_KEYS
        if unknown:
            raise ValueError(f"hicache storage extra config: unknown key(s) {sorted(unknown)} "
                             f"(tierkv reads {sorted(_OWN_KEYS)})")
        self.cache_prefix = extra.get("cache_prefix", "") or ""
        if not isinstance(self.cache_prefix, str) or "@" in self.cache_prefix:
            raise ValueError(f"cache_prefix: {self.cache_prefix!r} must be a string without '@'")
        self.group_semantics = _common.parse_bool(
            "enable_group_semantics", extra.get("enable_group_semantics", False))
        store_conf = extra.get("store") or {}
        if not isinstance(store_conf, dict):
            raise ValueError("store: must be a JSON object of DistributedStore.setup keys")
        store_conf = dict(store_conf)
        store_conf.update({k: extra[k] for k in _STORE_KEYS if k in extra})
        if extra.get("master_server_address"):
            store_conf["master_server_address"] = str(extra["master_server_address"])
        self.tp_rank = int(_common.field_of(storage_config, "tp_rank", 0) or 0)
        self.tp_size = int(_common.field_of(storage_config, "tp_size", 1) or 1)
        self.pp_rank = int(_common.field_of(storage_config, "pp_rank", 0) or 0)
        self.pp_size = int(_common.field_of(storage_config, "pp_size", 1) or 1)
        self.cp_rank = int(_common.field_of(storage_config, "attn_cp_rank", 0) or 0)
        self.cp_size = int(_common.field_of(storage_config, "attn_cp_size", 1) or 1)
        self.is_mla = bool(_common.field_of(storage_config, "is_mla_model", False))
        self.model = str(_common.field_of(storage_config, "model_name", "") or "model")
        setup, source = _common.store_setup_config(store_conf)
        self.store = _common.shared_store(setup)
        self.mem_pool_host = None
        self.pieces = None
        self.prefix = None
        self._registered = []
        self.side_pools = {}
        self._stats = {"prefetch_pages": 0, "prefetch_bytes": 0, "prefetch_seconds": 0.0,
                       "backup_pages": 0, "backup_bytes": 0, "backup_seconds": 0.0,
                       "get_errors": 0, "set_errors": 0}
        self._closed = False
        _log.info("tierkv HiCache storage: tp %d/%d pp %d/%d%s, store %s", self.tp_rank,
                  self.tp_size, self.pp_rank, self.pp_size, " (MLA)" if self.is_mla else "",
                  source)

    # ---- the host pool --------------------------------------------------------------------

    def register_mem_pool_host(self, mem_pool_host):
        """Registers the host KV pool's buffer with the store (zero-copy gets and sets) and
        fixes the key prefix from its layout."""
        super().register_mem_pool_host(mem_pool_host)
        self.mem_pool_host = mem_pool_host
        if getattr(mem_pool_host, "kv_buffer", None) is None:
            raise ValueError("tierkv HiCache storage: the host KV pool has no kv_buffer (a "
                             "logical anchor such as DeepSeek-V4's is not supported)")
        self.pieces = _pools.PagePieces(mem_pool_host, self.is_mla)
        self._register_buffers(self.pieces.buffers, "host KV pool")
        buf = mem_pool_host.kv_buffer
        # What a page's bytes depend on: the pool's page shape (layers, heads, head size or
        # latent size) in its layout, the dtype, and the placement of this rank's slice.
        fp = _common.layout_fingerprint(
            engine="sglang", model=self.model, kv_dtype=getattr(mem_pool_host, "dtype",
                                                                buf.dtype),
            page_size=self.pieces.page_size, layout=self.pieces.layout,
            page_shape=self.pieces.page_shape,
            mla=self.is_mla, tp_size=self.tp_size, pp_size=self.pp_size, cp_size=self.cp_size)
        self.fingerprint = fp
        head = f"{self.cache_prefix}@" if self.cache_prefix else ""
        self.prefix = f"{head}sglang@{_model_name(self.model)}@fp:{fp}@"
        rank = "" if self.is_mla else f"@tp{self.tp_rank}"
        cp = f"@cp{self.cp_rank}" if self.cp_size > 1 else ""
        self.suffix = f"{rank}{cp}@pp{self.pp_rank}"

    def _key(self, key):
        if self.prefix is None:
            raise RuntimeError("tierkv HiCache storage: register_mem_pool_host was not called")
        return f"{self.prefix}{key}{self.suffix}"

    def _config(self, keys, groups=None):
        cfg = _tierkv.ReplicateConfig()
        if self.group_semantics:
            cfg.group_ids = groups or [k[:k.rfind("@")] for k in keys]
        return cfg

    def _register_buffers(self, buffers, what):
        """Registers host tensors with the store (each once) for zero-copy transfers."""
        for buf in buffers:
            ptr = buf.data_ptr()
            if ptr in self._registered:
                continue
            nbytes = buf.numel() * buf.element_size()
            rc = self.store.register_buffer(ptr, nbytes)
            if rc != 0:
                raise RuntimeError(f"register_buffer of the {what} ({nbytes} bytes) failed: "
                                   f"{_tierkv.strerror(rc)}: {self.store.last_error()}")
            self._registered.append(ptr)

    # ---- zero-copy page transfers ---------------------------------------------------------

    def _page_starts(self, host_indices, n):
        ps = self.pieces.page_size
        idx = host_indices.tolist() if hasattr(host_indices, "tolist") else list(host_indices)
        if len(idx) < n * ps:
            raise ValueError(f"{len(idx)} host indices for {n} pages of {ps} tokens")
        return [int(idx[i * ps]) for i in range(n)]

    def batch_get_v1(self, keys, host_indices, extra_info=None):
        """Fills each page (the ``page_size`` host slots starting at ``host_indices[i *
        page_size]``) from its object; ``[True]`` per page that was read whole."""
        if not keys:
            return []
        t0 = time.perf_counter()
        starts = self._page_starts(host_indices, len(keys))
        ptrs, sizes = zip(*(self.pieces.pieces(s) for s in starts))
        got = self.store.batch_get_into_multi_buffers([self._key(k) for k in keys],
                                                      list(ptrs), list(sizes))
        want = self.pieces.object_bytes
        ok = [g == want for g in got]
        self._count(prefetch_pages=sum(ok), prefetch_bytes=sum(ok) * want,
                    prefetch_seconds=time.perf_counter() - t0,
                    get_errors=sum(1 for g in got if g < 0 and g != _common.OBJECT_NOT_FOUND))
        return ok

    def batch_set_v1(self, keys, host_indices, extra_info=None):
        """Stores each page; a page already stored counts as stored. MLA: rank 0 writes the
        one copy, other ranks report success without writing."""
        if not keys:
            return []
        if self.is_mla and self.tp_rank != 0:
            return [True] * len(keys)
        t0 = time.perf_counter()
        starts = self._page_starts(host_indices, len(keys))
        ptrs, sizes = zip(*(self.pieces.pieces(s) for s in starts))
        full = [self._key(k) for k in keys]
        got = self.store.batch_put_from_multi_buffers(full, list(ptrs), list(sizes),
                                                      self._config(full))
        ok = [_common.is_stored(rc) for rc in got]
        self._count(backup_pages=sum(ok), backup_bytes=sum(ok) * self.pieces.object_bytes,
                    backup_seconds=time.perf_counter() - t0, set_errors=len(ok) - sum(ok))
        return ok

    # ---- flat page tensors ----------------------------------------------------------------

    def get(self, key, target_location=None, target_sizes=None):
        """Fills ``target_location`` (a flat page tensor) and returns it; None if the page is
        not stored (or ``target_location`` is too small for it)."""
        out = self.batch_get([key], [target_location] if target_location is not None else None,
                             [target_sizes] if target_sizes is not None else None)
        return out[0]

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        """Flat page tensors filled from the pages' objects (None for a page not stored or
        of another size). Without targets, new tensors from the pool's dummy page."""
        if not keys:
            return []
        if not self.pieces.flat_compatible:
            _log.error("tierkv HiCache storage: layout %s has no flat data pages; use the "
                       "zero-copy interface (\"interface_v1\": 1)", self.pieces.layout)
            return [None] * len(keys)
        if target_locations is None:
            target_locations = [self.mem_pool_host.get_dummy_flat_data_page() for _ in keys]
        got = self.store.get_batch([self._key(k) for k in keys])
        out = []
        for t, data in zip(target_locations, got):
            flat = t.view(-1)
            if data and len(data) == flat.numel() * flat.element_size():
                flat.view(torch.uint8).copy_(torch.frombuffer(bytearray(data),
                                                              dtype=torch.uint8))
                out.append(t)
            else:
                out.append(None)
        self._count(prefetch_pages=sum(o is not None for o in out))
        return out

    def set(self, key, value=None, target_location=None, target_sizes=None):
        return self.batch_set([key], [value] if value is not None else None,
                              [target_location] if target_location is not None else None,
                              [target_sizes] if target_sizes is not None else None)

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        """Stores each flat page tensor; True when every page is stored (already stored counts
        as stored)."""
        if not keys:
            return True
        if self.is_mla and self.tp_rank != 0:
            return True
        if values is None:
            raise ValueError("batch_set: no values")
        if not self.pieces.flat_compatible:
            _log.error("tierkv HiCache storage: layout %s has no flat data pages; use the "
                       "zero-copy interface (\"interface_v1\": 1)", self.pieces.layout)
            return False
        full = [self._key(k) for k in keys]
        data = [v.contiguous().view(-1).view(torch.uint8).numpy() for v in values]
        got = self.store.put_batch(full, data, self._config(full))
        got = got if isinstance(got, list) else [got] * len(full)
        stored = sum(_common.is_stored(rc) for rc in got)
        self._count(backup_pages=stored, set_errors=len(got) - stored)
        return stored == len(got)

    def exists(self, key):
        return self.store.is_exist(self._key(key)) == 1

    def batch_exists(self, keys, extra_info=None):
        """How many pages from the first are stored (SGLang prefetches that prefix)."""
        if not keys:
            return 0
        found = self.store.batch_is_exist([self._key(k) for k in keys])
        for i, f in enumerate(found):
            if f != 1:
                return i
        return len(keys)

    def clear(self):
        """Removes every page this deployment stored (its cache_prefix, model and layout)."""
        if self.prefix is None:
            return
        self.store.remove_by_regex("^" + re.escape(self.prefix), True)

    def get_stats(self):
        """Counters since the last call (pages, bytes, seconds of prefetches and backups;
        errors), as a dict."""
        out, self._stats = self._stats, {k: 0 for k in self._stats}
        return out

    def close(self):
        if self._closed:
            return
        self._closed = True
        for ptr in self._registered:
            self.store.unregister_buffer(ptr)
        self._registered = []
        _common.release_store(self.store)

    # ---- helpers --------------------------------------------------------------------------

    def _count(self, **kw):
        for k, v in kw.items():
            self._stats[k] = self._stats.get(k, 0) + v

