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
flat page tensors SGLang hands them, so both paths read each other's objects. Keys::

    [cache_prefix@]sglang@<model>@fp:<fingerprint>@<page key>[@tp<rank>]@pp<rank>

``tp<rank>`` is left out for MLA models: every TP rank holds the same latent KV, so one copy
serves all (rank 0 writes it). The fingerprint covers the model, dtype, page size, layout,
layers, KV heads, head size and the TP/PP/CP placement (``_common.layout_fingerprint``).
"""

import logging
import re
import time

import torch

from .. import _tierkv
from ..connector import model_name as _model_name
from . import _common

_log = logging.getLogger("tierkv.integrations.sglang")

try:
    from sglang.srt.mem_cache.hicache_storage import HiCacheStorage as _Base
    HAVE_SGLANG = True
except ImportError:  # standalone: the same methods, no SGLang import anywhere in tierkv
    HAVE_SGLANG = False

    class _Base:
        def register_mem_pool_host(self, mem_pool_host):
            self.mem_pool_host = mem_pool_host

_OBJECT_ALREADY_EXISTS = -705

# Keys of the extra config this backend reads; the factory's own keys are accepted too.
_FACTORY_KEYS = {"backend_name", "module_path", "class_name", "interface_v1"}
_OWN_KEYS = {"master_server_address", "store", "cache_prefix", "enable_group_semantics"}


def _cfg(obj, name, default=None):
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


class _PagePieces:
    """Where each page's bytes lie in the host pool's buffer, for its layout."""

    def __init__(self, pool, is_mla):
        self.pool = pool
        self.layout = str(getattr(pool, "layout", "layer_first"))
        self.page_size = int(pool.page_size)
        buf = pool.kv_buffer
        self.buf = buf
        self.base = buf.data_ptr()
        self.elem = buf.element_size()
        self.strides = [s * self.elem for s in buf.stride()]
        self.is_mla = is_mla
        shape = list(buf.shape)
        if not buf.is_contiguous():
            raise ValueError("the host KV pool's buffer must be contiguous")
        if is_mla:
            # layer_first [L, size, 1, d]; page_first [size, L, 1, d];
            # page_first_direct [pages, L, page_size, 1, d]
            self.layer_num = shape[0] if self.layout == "layer_first" else shape[1]
            self.kv_parts = 1
        else:
            # layer_first [2, L, size, h, d]; page_first [2, size, L, h, d];
            # page_first_direct [2, pages, L, page_size, h, d]
            self.layer_num = shape[1] if self.layout == "layer_first" else shape[2]
            self.kv_parts = 2
        if self.layout not in ("layer_first", "page_first", "page_first_direct"):
            raise ValueError(f"host KV pool layout {self.layout!r} is not supported by tierkv "
                             "(layer_first, page_first, page_first_direct)")
        self.token_bytes = self.elem
        for n in shape[-2:]:
            self.token_bytes *= n  # one token of one layer: heads x head_dim (or 1 x d)
        self.part_bytes = self.token_bytes * self.page_size * self.layer_num
        self.object_bytes = self.part_bytes * self.kv_parts

    def pieces(self, token_index):
        """(pointers, sizes) of the page starting at host token ``token_index``."""
        ptrs, sizes = [], []
        off0 = 0
        for part in range(self.kv_parts):
            if not self.is_mla:
                off0 = part * self.strides[0]
            if self.layout == "page_first_direct":
                page = token_index // self.page_size
                d = 1 if not self.is_mla else 0
                ptrs.append(self.base + off0 + page * self.strides[d])
                sizes.append(self.part_bytes)
            elif self.layout == "page_first":
                d = 1 if not self.is_mla else 0
                ptrs.append(self.base + off0 + token_index * self.strides[d])
                sizes.append(self.part_bytes)
            else:  # layer_first: one piece per layer
                ld, td = (1, 2) if not self.is_mla else (0, 1)
                per = self.token_bytes * self.page_size
                for layer in range(self.layer_num):
                    ptrs.append(self.base + off0 + layer * self.strides[ld]
                                + token_index * self.strides[td])
                    sizes.append(per)
        return ptrs, sizes


class TierkvHiCacheStorage(_Base):
    """SGLang ``HiCacheStorage`` backed by tierkv. ``storage_config``: SGLang's
    ``HiCacheStorageConfig`` (tp/pp ranks and sizes, is_mla_model, model_name, extra_config);
    ``kwargs``: what SGLang's factory passes beside it (unused)."""

    def __init__(self, storage_config=None, kwargs=None, **more):
        self.config = storage_config
        extra = dict(_cfg(storage_config, "extra_config", None) or {})
        unknown = set(extra) - _FACTORY_KEYS - _OWN_KEYS
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
        if extra.get("master_server_address"):
            store_conf["master_server_address"] = str(extra["master_server_address"])
        self.tp_rank = int(_cfg(storage_config, "tp_rank", 0) or 0)
        self.tp_size = int(_cfg(storage_config, "tp_size", 1) or 1)
        self.pp_rank = int(_cfg(storage_config, "pp_rank", 0) or 0)
        self.pp_size = int(_cfg(storage_config, "pp_size", 1) or 1)
        self.cp_rank = int(_cfg(storage_config, "attn_cp_rank", 0) or 0)
        self.cp_size = int(_cfg(storage_config, "attn_cp_size", 1) or 1)
        self.is_mla = bool(_cfg(storage_config, "is_mla_model", False))
        self.model = str(_cfg(storage_config, "model_name", "") or "model")
        setup, source = _common.store_setup_config(store_conf)
        self.store = _common.shared_store(setup)
        self.mem_pool_host = None
        self.pieces = None
        self.prefix = None
        self._registered = None
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
        self.pieces = _PagePieces(mem_pool_host, self.is_mla)
        buf = mem_pool_host.kv_buffer
        nbytes = buf.numel() * buf.element_size()
        rc = self.store.register_buffer(buf.data_ptr(), nbytes)
        if rc != 0:
            raise RuntimeError(f"register_buffer of the host KV pool ({nbytes} bytes) failed: "
                               f"{_tierkv.strerror(rc)}")
        self._registered = buf.data_ptr()
        shape = list(buf.shape)
        fp = _common.layout_fingerprint(
            engine="sglang", model=self.model, kv_dtype=getattr(mem_pool_host, "dtype",
                                                                buf.dtype),
            page_size=self.pieces.page_size, layout=self.pieces.layout,
            num_layers=self.pieces.layer_num, kv_heads=shape[-2], head_size=shape[-1],
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

    def _config(self, keys):
        cfg = _tierkv.ReplicateConfig()
        if self.group_semantics:
            cfg.group_ids = [k[:k.rfind("@")] for k in keys]
        return cfg

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
                    get_errors=sum(1 for g in got if g < 0 and g != -704))
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
        ok = [rc == 0 or rc == _OBJECT_ALREADY_EXISTS for rc in got]
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
        full = [self._key(k) for k in keys]
        data = [v.contiguous().view(-1).view(torch.uint8).numpy() for v in values]
        got = self.store.put_batch(full, data, self._config(full))
        got = got if isinstance(got, list) else [got] * len(full)
        stored = sum(rc == 0 or rc == _OBJECT_ALREADY_EXISTS for rc in got)
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
        out, self._stats = self._stats, {k: 0 for k in self._stats}
        return out

    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._registered is not None:
            self.store.unregister_buffer(self._registered)
        _common.release_store(self.store)

    # ---- helpers --------------------------------------------------------------------------

    def _count(self, **kw):
        for k, v in kw.items():
            self._stats[k] = self._stats.get(k, 0) + v

