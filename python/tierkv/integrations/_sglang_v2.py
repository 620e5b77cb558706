"""SGLang's v2 storage calls for hybrid models, as a mixin of ``TierkvHiCacheStorage``.

SGLang's ``HybridCacheController`` registers every host pool of the model's ``HostPoolGroup``
with ``register_mem_host_pool_v2(pool, name)`` (the KV anchor included), asks
``batch_exists_v2(keys, pool_transfers)`` how long a prefix can be restored, writes side pools
with ``batch_set_v2`` before the KV pages (v1 or flat path) and reads them with
``batch_get_v2`` after. A side pool's page is one object keyed
``<prefix><page key>.<pool>.<pool fingerprint><rank suffix>``; the KV page keeps its bare key.

Hit policies (``PoolTransfer.hit_policy``), as SGLang's Mooncake backend applies them: every
pool starts from the KV prefix; ``all_pages`` keeps the prefixes whose pages all exist in the
pool, ``trailing_pages`` those whose last ``len(transfer.keys)`` pages (1 without keys) exist.
The restorable prefixes are those every pool keeps; the result's ``kv_hit_pages`` is the longest.
"""

import logging
import time
from dataclasses import dataclass, field
from typing import List, Optional

from . import _common
from . import _sglang_pools as _pools

_log = logging.getLogger("tierkv.integrations.sglang")

try:
    from sglang.srt.mem_cache.hicache_storage import PoolTransferResult
except ImportError:  # SGLang without hybrid pools, or none at all

    @dataclass
    class PoolTransferResult:
        kv_hit_pages: int
        extra_pool_hit_pages: dict
        restorable: Optional[List[int]] = field(default=None)

_HAS_RESTORABLE = "restorable" in getattr(PoolTransferResult, "__dataclass_fields__", {})
KV = "kv"
ALL_PAGES = "all_pages"
TRAILING_PAGES = "trailing_pages"


def _result(kv_hit_pages, hits, restorable):
    if _HAS_RESTORABLE:
        return PoolTransferResult(kv_hit_pages, hits, restorable)
    return PoolTransferResult(kv_hit_pages, hits)


class _SidePool:
    """A registered side pool: its piece map, key part and whether one copy serves all ranks."""

    def __init__(self, name, pool, pieces, tag, replicated):
        self.name, self.pool, self.pieces = name, pool, pieces
        self.tag, self.replicated = tag, replicated


class HybridPoolsMixin:
    """``register_mem_host_pool_v2``, ``batch_exists_v2``, ``batch_get_v2``,
    ``batch_set_v2``. Needs the host class's ``store``, ``_key``, ``_config``,
    ``_register_buffers``, ``batch_exists``, ``batch_get_v1``/``batch_set_v1`` and placement
    fields."""

    def register_mem_host_pool_v2(self, host_pool, host_pool_name):
        """Registers a pool of a hybrid model. The KV anchor is the pool of
        ``register_mem_pool_host``; any other pool's buffers are registered with the store and
        its pages get their own objects."""
        reg = getattr(self, "registered_pools", None)
        if reg is None:
            reg = self.registered_pools = {}
        reg[host_pool_name] = host_pool
        name = _pools.pool_name(host_pool_name)
        if name == KV:
            if self.prefix is None:
                self.register_mem_pool_host(host_pool)
            return
        old = self.side_pools.get(name)
        if old is not None and old.pool is host_pool:
            return
        pieces = _pools.pieces_for(host_pool)
        self._register_buffers(pieces.buffers, f"host pool {name!r}")
        replicated = _pools.replicated(name, host_pool, self.is_mla)
        # What a side page's bytes depend on: the pool's kind, layout, page shape (or the byte
        # sizes of its components) and dtypes, and this rank's placement.
        fp = _common.layout_fingerprint(
            engine="sglang", pool=name, pool_kind=type(host_pool).__name__,
            layout=pieces.layout, page_size=pieces.page_size, page_shape=pieces.page_shape,
            dtypes=_pools.pool_dtypes(host_pool, pieces), replicated=replicated,
            tp_size=self.tp_size, pp_size=self.pp_size, cp_size=self.cp_size)
        self.side_pools[name] = _SidePool(name, host_pool, pieces, f".{name}.{fp}", replicated)
        _log.info("tierkv HiCache storage: pool %r (%s, %s, %d bytes a page%s)", name,
                  type(host_pool).__name__, pieces.layout, pieces.object_bytes,
                  ", one copy for all TP ranks" if replicated else "")

    # ---- keys -----------------------------------------------------------------------------

    def _side_key(self, side, key):
        """The object key of page ``key`` of a side pool; its group is the KV page's."""
        kv = self._key(key)
        if side.replicated:
            cp = f"@cp{self.cp_rank}" if self.cp_size > 1 else ""
            suffix = f"{cp}@pp{self.pp_rank}"
        else:
            suffix = f"@tp{self.tp_rank}" + (f"@cp{self.cp_rank}" if self.cp_size > 1 else "") \
                + f"@pp{self.pp_rank}"
        return f"{self.prefix}{key}{side.tag}{suffix}", kv[:kv.rfind("@")]

    def _side(self, transfer):
        name = _pools.pool_name(transfer.name)
        side = self.side_pools.get(name)
        if side is None and name != KV:
            _log.error("tierkv HiCache storage: pool %r was not registered "
                       "(register_mem_host_pool_v2); its pages count as missing", name)
        return name, side

    # ---- exists ---------------------------------------------------------------------------

    def batch_exists_v2(self, keys, pool_transfers=None, extra_info=None):
        """The longest prefix of ``keys`` whose KV pages and every pool's pages (per its hit
        policy) are stored: ``PoolTransferResult(kv_hit_pages, {pool: pages found},
        restorable prefixes)``."""
        kv_pages = self.batch_exists(keys, extra_info) if keys else 0
        hits = {}
        if kv_pages:
            hits[_kv_name(pool_transfers)] = kv_pages
        restorable = list(range(1, kv_pages + 1))
        for transfer in pool_transfers or []:
            if not restorable:
                break
            name, side = self._side(transfer)
            if name == KV:
                continue
            if side is None:
                present = [False] * kv_pages
            else:
                found = self.store.batch_is_exist(
                    [self._side_key(side, k)[0] for k in keys[:kv_pages]])
                present = [f == 1 for f in found]
            policy = _pools.pool_name(getattr(transfer, "hit_policy", ALL_PAGES))
            if policy == ALL_PAGES:
                boundary = present.index(False) if False in present else kv_pages
                keep = set(range(1, boundary + 1))
            elif policy == TRAILING_PAGES:
                window = max(1, len(transfer.keys) if transfer.keys else 1)
                keep = {n for n in range(1, kv_pages + 1)
                        if all(present[max(0, n - window):n])}
                boundary = max(keep) if keep else 0
            else:
                raise ValueError(f"batch_exists_v2: unknown hit policy {policy!r}")
            if boundary:
                hits[transfer.name] = boundary
            restorable = [n for n in restorable if n in keep]
        return _result(restorable[-1] if restorable else 0, hits, restorable)

    # ---- reads and writes -----------------------------------------------------------------

    def batch_get_v2(self, transfers, extra_info=None):
        """Reads each transfer's pages (``keys`` zipped with the pages starting at
        ``host_indices[i * page_size]`` of its pool): ``{pool: [page read whole]}``."""
        return {t.name: self._io_v2(t, False, extra_info) for t in transfers or []}

    def batch_set_v2(self, transfers, extra_info=None):
        """Writes each transfer's pages; a page already stored counts as stored. A pool with
        one copy for all TP ranks is written by rank 0 only (the others report success)."""
        return {t.name: self._io_v2(t, True, extra_info) for t in transfers or []}

    def _io_v2(self, transfer, is_set, extra_info):
        keys = list(transfer.keys or [])
        if not keys:
            return []
        name, side = self._side(transfer)
        if name != KV and side is None:
            return [False] * len(keys)
        ps = side.pieces.page_size if side is not None else self.pieces.page_size
        idx = transfer.host_indices
        n_idx = 0 if idx is None else (idx.numel() if hasattr(idx, "numel") else len(idx))
        if n_idx != len(keys) * ps:
            _log.error("tierkv HiCache storage: pool %r: %d host indices for %d pages of %d",
                       name, n_idx, len(keys), ps)
            return [False] * len(keys)
        if name == KV:  # the anchor's pages under their bare keys, as v1 stores them
            io = self.batch_set_v1 if is_set else self.batch_get_v1
            return io(keys, idx, extra_info)
        if is_set and side.replicated and self.tp_rank != 0:
            return [True] * len(keys)
        t0 = time.perf_counter()
        flat = idx.tolist() if hasattr(idx, "tolist") else list(idx)
        ptrs, sizes = zip(*(side.pieces.pieces(int(flat[i * ps])) for i in range(len(keys))))
        full, groups = zip(*(self._side_key(side, k) for k in keys))
        want = side.pieces.object_bytes
        if is_set:
            got = self.store.batch_put_from_multi_buffers(
                list(full), list(ptrs), list(sizes), self._config(list(full), list(groups)))
            ok = [_common.is_stored(rc) for rc in got]
            self._count(backup_pages=sum(ok), backup_bytes=sum(ok) * want,
                        backup_seconds=time.perf_counter() - t0, set_errors=len(ok) - sum(ok))
        else:
            got = self.store.batch_get_into_multi_buffers(list(full), list(ptrs), list(sizes))
            ok = [g == want for g in got]
            self._count(prefetch_pages=sum(ok), prefetch_bytes=sum(ok) * want,
                        prefetch_seconds=time.perf_counter() - t0,
                        get_errors=sum(1 for g in got
                                       if g < 0 and g != _common.OBJECT_NOT_FOUND))
        return ok


def _kv_name(pool_transfers):
    """SGLang's ``PoolName.KV`` when its enum is at hand (a transfer's name is one), else
    "kv" (equal to it: ``PoolName`` is a str enum)."""
    for t in pool_transfers or []:
        cls = type(t.name)
        if hasattr(cls, "KV"):
            return cls.KV
    return KV
