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
