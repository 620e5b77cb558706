# TEST DOUBLE (tierkv tests), not SGLang.
# Mimics how HiCacheController (python/sglang/srt/managers/cache_controller.py of
# sgl-project/sglang @ 001067fffe33427bee0ed2f007fb7551a1d76b44) drives an L3 storage
# backend, single rank, synchronously (no threads / all-reduce):
#   attach_storage_backend -> _generate_storage_config, StorageBackendFactory.create_backend,
#     register_mem_pool_host, page get/set function selection (zero-copy v1 iff backend in
#     the built-in list, or "dynamic" with extra_config["interface_v1"] truthy);
#   backup  (write_storage -> _page_backup): batches of STORAGE_BATCH_SIZE pages,
#     page_set_func(batch_hashes, batch_host_indices, extra_info); stop at first failed batch;
#     skipped entirely on MLA ranks with tp_rank != 0 (backup_skip);
#   prefetch (_storage_hit_query -> batch_exists per batch, stop at first short batch;
#     then host alloc + _page_transfer -> page_get_func per batch).
# Keys come from the real chained page hash (sglang.srt.mem_cache.utils.get_hash_str).
# Own code; see /work/specs/sglang.md.
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch

from sglang.srt.mem_cache.hicache_storage import (
    STORAGE_BATCH_SIZE,
    HiCacheStorage,
    HiCacheStorageConfig,
    HiCacheStorageExtraInfo,
    PoolHitPolicy,
    PoolName,
    PoolTransfer,
    PoolTransferResult,
    count_pool_hits,
)
from sglang.srt.mem_cache.memory_pool_host import MLATokenToKVPoolHost
from sglang.srt.mem_cache.storage import StorageBackendFactory
from sglang.srt.mem_cache.utils import get_hash_str

ZERO_COPY_BUILTINS = ("hf3fs", "mooncake", "eic", "nixl", "simm", "mori", "kvcc")


def page_hashes(token_ids: List[int], page_size: int, prior_hash: Optional[str] = None) -> List[str]:
    """Chained per-page keys exactly as HiCache computes them (full pages only)."""
    n = (len(token_ids) // page_size) * page_size
    return get_hash_str(list(token_ids[:n]), prior_hash, page_size=page_size)


def make_storage_config(
    mem_pool_host,
    extra_config: Optional[dict] = None,
    model_name: Optional[str] = None,
    tp_rank: int = 0,
    tp_size: int = 1,
    pp_rank: int = 0,
    pp_size: int = 1,
    attn_cp_rank: int = 0,
    attn_cp_size: int = 1,
    dp_rank: int = 0,
    dp_size: int = 1,
    is_mla_model: Optional[bool] = None,
    enable_storage_metrics: bool = False,
) -> HiCacheStorageConfig:
    """Like _generate_storage_config: extra_config is the parsed JSON minus the keys the
    radix cache pops (prefetch_threshold, prefetch_timeout_*, hicache_storage_pass_prefix_keys)
    and minus tp_lcm_size; is_mla from the pool type; is_page_first_layout only for
    layout == "page_first"."""
    extra = dict(extra_config or {})
    for k in ("prefetch_threshold", "prefetch_timeout_base", "prefetch_timeout_per_ki_token",
              "hicache_storage_pass_prefix_keys"):
        extra.pop(k, None)
    tp_lcm_size = extra.pop("tp_lcm_size", None)
    if is_mla_model is None:
        is_mla_model = isinstance(mem_pool_host, MLATokenToKVPoolHost)
    return HiCacheStorageConfig(
        tp_rank=tp_rank, tp_size=tp_size, pp_rank=pp_rank, pp_size=pp_size,
        attn_cp_rank=attn_cp_rank, attn_cp_size=attn_cp_size,
        is_mla_model=is_mla_model, enable_storage_metrics=enable_storage_metrics,
        is_page_first_layout=mem_pool_host.layout == "page_first",
        model_name=model_name, dp_rank=dp_rank, dp_size=dp_size,
        tp_lcm_size=tp_lcm_size, should_split_heads=False, extra_config=extra,
    )


@dataclass
class PrefetchResult:
    hit_hashes: List[str]
    storage_hit_tokens: int
    host_indices: Optional[torch.Tensor]
    completed_tokens: int
    calls: List[str] = field(default_factory=list)
    pool_hits: dict = field(default_factory=dict)  # hybrid: pages read per side pool
    exists: Optional[PoolTransferResult] = None  # hybrid: what batch_exists_v2 answered


class HiCacheDriver:
    def __init__(
        self,
        mem_pool_host,
        storage_backend: str = "dynamic",
        storage_config: Optional[HiCacheStorageConfig] = None,
        backend: Optional[HiCacheStorage] = None,
        **config_kwargs,
    ):
        self.mem_pool_host = mem_pool_host
        self.page_size = mem_pool_host.page_size
        self.storage_backend_type = storage_backend
        self.storage_config = storage_config or make_storage_config(mem_pool_host, **config_kwargs)
        self.backup_skip = self.storage_config.is_mla_model and self.storage_config.tp_rank != 0
        if backend is None:
            backend = StorageBackendFactory.create_backend(
                storage_backend, self.storage_config, mem_pool_host
            )
        self.backend = backend
        self.backend.register_mem_pool_host(mem_pool_host)
        extra = self.storage_config.extra_config or {}
        self.zero_copy = storage_backend in ZERO_COPY_BUILTINS or (
            storage_backend == "dynamic" and bool(extra.get("interface_v1", 0))
        )

    # ---- page IO, as _page_set_zero_copy/_generic_page_set, _page_get_zero_copy/_generic_page_get
    def _page_set(self, hashes, host_indices, extra_info) -> bool:
        if self.zero_copy:
            return all(self.backend.batch_set_v1(hashes, host_indices, extra_info))
        data = [self.mem_pool_host.get_data_page(host_indices[i * self.page_size])
                for i in range(len(hashes))]
        return self.backend.batch_set(hashes, data)

    def _page_get(self, hashes, host_indices, extra_info) -> int:
        if self.zero_copy:
            results = self.backend.batch_get_v1(hashes, host_indices, extra_info)
            n = 0
            for ok in results[: len(hashes)]:
                if not ok:
                    break
                n += 1
            return n
        dst = [self.mem_pool_host.get_dummy_flat_data_page() for _ in hashes]
        pages = self.backend.batch_get(hashes, dst)
        if pages is None:
            return 0
        n = 0
        for i in range(len(hashes)):
            if pages[i] is None:
                break
            self.mem_pool_host.set_from_flat_data_page(host_indices[i * self.page_size], pages[i])
            n += 1
        return n

    # ---- backup (write_storage + _page_backup) ----
    def backup(
        self,
        token_ids: List[int],
        host_indices: torch.Tensor,
        prior_hash: Optional[str] = None,
        prefix_keys: Optional[List[str]] = None,
        hash_value: Optional[List[str]] = None,
    ) -> int:
        """Returns completed_tokens. host_indices: page_size slots per full page."""
        if hash_value is None:
            hash_value = page_hashes(token_ids, self.page_size, prior_hash)
        if self.backup_skip:
            return 0
        return self._page_backup_kv(hash_value, host_indices, prefix_keys)

    def _page_backup_kv(self, hash_value, host_indices, prefix_keys=None) -> int:
        done = 0
        for i in range(0, len(hash_value), STORAGE_BATCH_SIZE):
            batch = hash_value[i : i + STORAGE_BATCH_SIZE]
            idx = host_indices[i * self.page_size : (i + len(batch)) * self.page_size]
            info = HiCacheStorageExtraInfo(prefix_keys=prefix_keys)
            if not self._page_set(batch, idx, info):
                break
            if prefix_keys:
                prefix_keys += batch
            done += self.page_size * len(batch)
        return done

    # ---- prefetch (_storage_hit_query, then alloc + _page_transfer) ----
    def query_hits(self, token_ids: List[int], last_hash: Optional[str] = None,
                   prefix_keys: Optional[List[str]] = None) -> Tuple[List[str], int]:
        prefix_keys = list(prefix_keys) if prefix_keys else None
        hashes = page_hashes(token_ids, self.page_size, last_hash)
        hit: List[str] = []
        tokens = 0
        for s in range(0, len(hashes), STORAGE_BATCH_SIZE):
            batch = hashes[s : s + STORAGE_BATCH_SIZE]
            n = self.backend.batch_exists(batch, HiCacheStorageExtraInfo(prefix_keys=prefix_keys))
            hit.extend(batch[:n])
            tokens += n * self.page_size
            if n < len(batch):
                break
            if prefix_keys:
                prefix_keys += batch
        return hit, tokens

    def prefetch(self, token_ids: List[int], last_hash: Optional[str] = None,
                 prefix_keys: Optional[List[str]] = None,
                 prefetch_threshold: int = 0) -> PrefetchResult:
        hit, tokens = self.query_hits(token_ids, last_hash, prefix_keys)
        if tokens == 0 or tokens < prefetch_threshold:
            return PrefetchResult(hit, tokens, None, 0)
        host_indices = self.mem_pool_host.alloc(tokens)
        if host_indices is None:
            return PrefetchResult(hit, tokens, None, 0)
        pk = list(prefix_keys) if prefix_keys else None
        pages = 0
        for i in range(0, len(hit), STORAGE_BATCH_SIZE):
            batch = hit[i : i + STORAGE_BATCH_SIZE]
            idx = host_indices[i * self.page_size : (i + len(batch)) * self.page_size]
            got = self._page_get(batch, idx, HiCacheStorageExtraInfo(prefix_keys=pk, extra_info=None))
            if pk:
                pk += batch
            pages += got
            if got != len(batch):
                break
        return PrefetchResult(hit, tokens, host_indices, pages * self.page_size)


class HybridHiCacheDriver(HiCacheDriver):
    """HybridCacheController's storage path (python/sglang/srt/mem_cache/hybrid_cache/
    hybrid_cache_controller.py @ 00343773d3293d382f0b39101f36b656d30ad2f0), single rank,
    synchronous:
      attach: the backend gets the anchor (KV) host pool through register_mem_pool_host,
        then register_mem_host_pool_v2(entry.host_pool, entry.name) for every entry of the
        HostPoolGroup (the KV anchor included);
      backup (_page_backup): batch_set_v2(side-pool transfers that should_backup: all on
        backup_skip=False ranks, only MAMBA on MLA ranks != 0) with KV-derived transfers
        resolved to the KV host indices/keys, then the KV pages as HiCacheController does
        (skipped on backup_skip ranks, where completed = all iff every side page was set);
      prefetch (_storage_hit_query): ONE batch_exists_v2(all page hashes, pool_transfers)
        (batch_exists without transfers) -> kv_hit_pages; then the KV pages per batch of
        STORAGE_BATCH_SIZE, with KV-derived pools read by batch_get_v2 beside each batch and
        the hit clamped to the minimum (_page_transfer_kv_batch); then, if every KV page
        arrived, _sync_trailing_keys (a TRAILING_PAGES transfer's keys become the last
        len(keys) hit hashes, its host indices cut to match) and batch_get_v2 of the other
        side pools; pool hits = leading successes per pool (count_pool_hits)."""

    def __init__(self, host_group, storage_backend: str = "dynamic",
                 storage_config: Optional[HiCacheStorageConfig] = None,
                 backend: Optional[HiCacheStorage] = None, **config_kwargs):
        self.host_group = host_group
        super().__init__(host_group.anchor_entry.host_pool, storage_backend, storage_config,
                         backend, **config_kwargs)
        for entry in host_group.entries:
            self.backend.register_mem_host_pool_v2(entry.host_pool, entry.name)

    def should_backup(self, transfer: PoolTransfer) -> bool:
        if not self.backup_skip:
            return True
        return transfer.name == PoolName.MAMBA  # rank-sharded state even for MLA KV

    @staticmethod
    def _resolve_derived(transfers, kv_host_indices, kv_keys):
        for t in transfers:
            if t.indices_from_pool is None:
                continue
            if t.indices_from_pool == PoolName.KV:
                t.host_indices = kv_host_indices
                if t.keys is None:
                    t.keys = kv_keys
                continue
            source = next(s for s in transfers
                          if s.indices_from_pool is None and s.name == t.indices_from_pool)
            t.host_indices = source.host_indices
            if t.keys is None:
                t.keys = source.keys

    def backup(self, token_ids, host_indices, prior_hash=None, prefix_keys=None,
               hash_value=None, extra_pools: Optional[List[PoolTransfer]] = None) -> int:
        if hash_value is None:
            hash_value = page_hashes(token_ids, self.page_size, prior_hash)
        transfers = [t for t in extra_pools or [] if self.should_backup(t)]
        results = {}
        self.last_pool_hits = {}
        if transfers:
            self._resolve_derived(transfers, host_indices, hash_value)
            results = self.backend.batch_set_v2(transfers)
            self.last_pool_hits = count_pool_hits(results)
        if not self.backup_skip:
            return self._page_backup_kv(hash_value, host_indices, prefix_keys)
        ok = bool(transfers) and all(
            len(results.get(t.name, [])) == len(t.keys or []) and all(results[t.name])
            for t in transfers)
        return len(hash_value) * self.page_size if ok else 0

    def _sync_trailing_keys(self, transfers, all_hashes, kv_hit_pages):
        for t in transfers:
            if t.hit_policy != PoolHitPolicy.TRAILING_PAGES:
                continue
            n = len(t.keys) if t.keys else 1
            t.keys = all_hashes[max(0, kv_hit_pages - n) : kv_hit_pages]
            if t.host_indices is None:
                continue
            entry = self.host_group.entry_map.get(t.name)
            ps = entry.host_pool.page_size if entry is not None else self.page_size
            need = len(t.keys) * ps
            if t.host_indices.numel() > need:
                entry.host_pool.free(t.host_indices[need:])
                t.host_indices = t.host_indices[:need]

    def prefetch(self, token_ids, last_hash=None, prefix_keys=None, prefetch_threshold=0,
                 extra_pools: Optional[List[PoolTransfer]] = None) -> PrefetchResult:
        hashes = page_hashes(token_ids, self.page_size, last_hash)
        info = HiCacheStorageExtraInfo(prefix_keys=list(prefix_keys) if prefix_keys else None)
        if extra_pools:
            res = self.backend.batch_exists_v2(hashes, extra_pools, info)
        else:
            res = PoolTransferResult(self.backend.batch_exists(hashes, info), {})
        hit = hashes[: res.kv_hit_pages]
        tokens = len(hit) * self.page_size
        if tokens == 0 or tokens < prefetch_threshold:
            return PrefetchResult(hit, tokens, None, 0, exists=res)
        host_indices = self.mem_pool_host.alloc(tokens)
        if host_indices is None:
            return PrefetchResult(hit, tokens, None, 0, exists=res)
        derived = [t for t in extra_pools or [] if t.indices_from_pool == PoolName.KV]
        pages = 0
        for i in range(0, len(hit), STORAGE_BATCH_SIZE):
            batch = hit[i : i + STORAGE_BATCH_SIZE]
            idx = host_indices[i * self.page_size : (i + len(batch)) * self.page_size]
            got = self._page_get(batch, idx, HiCacheStorageExtraInfo(prefix_keys=None))
            if derived:
                side = self.backend.batch_get_v2(
                    [PoolTransfer(name=t.name, host_indices=idx, keys=batch) for t in derived])
                got = min([got, *count_pool_hits(side).values()])
            pages += got
            if got != len(batch):
                break
        pool_hits = {}
        if pages == len(hit) and extra_pools:
            others = [t for t in extra_pools if t.indices_from_pool != PoolName.KV]
            self._sync_trailing_keys(others, hit, pages)
            self._resolve_derived(others, host_indices, hit)
            pool_hits = count_pool_hits(self.backend.batch_get_v2(others))
        return PrefetchResult(hit, tokens, host_indices, pages * self.page_size,
                              pool_hits=pool_hits, exists=res)
