# TEST DOUBLE (tierkv tests), not SGLang.
# Mirrors python/sglang/srt/mem_cache/hicache_storage.py of sgl-project/sglang at commit
# 001067fffe33427bee0ed2f007fb7551a1d76b44 (class/field names, signatures, defaults and
# documented return semantics). `get_hash_str` mirrors the older in-module helper of commit
# bb424de23a4659f89cfd97dcad3aa1935a1e1d3e (newer SGLang moved it to mem_cache/utils.py and a
# native extension; the digest is identical). Own code, written for tests; see
# /work/specs/sglang.md.
from __future__ import annotations

import hashlib
import logging
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, List, Optional

import torch

if TYPE_CHECKING:  # real: from sglang.srt.mem_cache.pool_host import HostKVCache
    from sglang.srt.mem_cache.memory_pool_host import HostKVCache

logger = logging.getLogger(__name__)

# Max pages per batched storage IO call (HiCacheController splits exists/get/set by this).
STORAGE_BATCH_SIZE = 128


def get_hash_str(token_ids: List[int], prior_hash: Optional[str] = None) -> str:
    """SHA-256 hex of one page: digest bytes of `prior_hash` (if any) then each token as
    4-byte little-endian unsigned. Tuple tokens (EAGLE bigram) hash each element."""
    h = hashlib.sha256()
    if prior_hash:
        h.update(bytes.fromhex(prior_hash))
    for tok in token_ids:
        parts = tok if isinstance(tok, tuple) else (tok,)
        for p in parts:
            h.update(int(p).to_bytes(4, byteorder="little", signed=False))
    return h.hexdigest()


def hash_str_to_int64(hash_str: str) -> int:
    v = int(hash_str[:16], 16)
    return v - (1 << 64) if v >= (1 << 63) else v


@dataclass
class HiCacheStorageConfig:
    tp_rank: int
    tp_size: int
    pp_rank: int
    pp_size: int
    attn_cp_rank: int
    attn_cp_size: int
    is_mla_model: bool  # really "is_rank_replicated": MLA (and DeepSeek-V4) pools
    enable_storage_metrics: bool
    is_page_first_layout: bool  # mem_pool_host.layout == "page_first" (only that one)
    model_name: Optional[str]
    dp_rank: int = 0
    dp_size: int = 1
    tp_lcm_size: Optional[int] = None
    should_split_heads: bool = False
    extra_config: Optional[dict] = None


@dataclass
class HiCacheStorageExtraInfo:
    prefix_keys: Optional[List[str]] = None
    extra_info: Optional[dict] = None


class PoolName(str, Enum):
    KV = "kv"
    MAMBA = "mamba"
    SWA = "swa"
    INDEXER = "indexer"
    DEEPSEEK_V4_C4 = "deepseek_v4_c4"
    DEEPSEEK_V4_C4_INDEXER = "deepseek_v4_c4_indexer"
    DEEPSEEK_V4_C128 = "deepseek_v4_c128"
    DEEPSEEK_V4_C4_STATE = "deepseek_v4_c4_state"
    DEEPSEEK_V4_C4_INDEXER_STATE = "deepseek_v4_c4_indexer_state"
    DEEPSEEK_V4_C128_STATE = "deepseek_v4_c128_state"
    DRAFT = "draft"
    DRAFT_INDEXER = "draft_indexer"
    DRAFT_SWA = "draft_swa"

    def __str__(self) -> str:
        return self.value


class PoolHitPolicy(str, Enum):
    ALL_PAGES = "all_pages"
    TRAILING_PAGES = "trailing_pages"


@dataclass
class PoolTransfer:
    name: PoolName
    host_indices: Optional[torch.Tensor] = None
    device_indices: Optional[torch.Tensor] = None
    keys: Optional[List[str]] = None
    hit_policy: PoolHitPolicy = PoolHitPolicy.ALL_PAGES
    nodes_to_load: Optional[List[Any]] = None
    indices_from_pool: Optional[PoolName] = None


@dataclass
class PoolTransferResult:
    kv_hit_pages: int
    extra_pool_hit_pages: dict
    # Present in newer SGLang (mooncake_store.py@00fe477 passes a 3rd positional arg);
    # optional here so both call shapes work.
    restorable: Optional[List[int]] = None

    @classmethod
    def empty(cls) -> "PoolTransferResult":
        return cls(0, {})

    def update_kv_hit_pages(self, kv_hit_pages: int) -> None:
        self.kv_hit_pages = max(self.kv_hit_pages, kv_hit_pages)

    def update_extra_pool_hit_pages(self, results: dict) -> None:
        self.extra_pool_hit_pages.update(results)


def count_pool_hits(results: dict) -> dict:
    return {n: (rs.index(False) if False in rs else len(rs)) for n, rs in results.items()}


class HiCacheStorage(ABC):
    """Generic key-value interface for HiCache L3 (one object per page, keyed by the
    page's chained hash string)."""

    def register_mem_pool_host(self, mem_pool_host: "HostKVCache"):
        self.mem_pool_host = mem_pool_host

    def register_mem_host_pool_v2(self, host_pool: "HostKVCache", host_pool_name):
        if not hasattr(self, "registered_pools"):
            self.registered_pools = {}
        self.registered_pools[host_pool_name] = host_pool

    # ---- v2 (hybrid pools); base raises ----
    def batch_exists_v2(
        self,
        keys: List[str],
        pool_transfers: Optional[List[PoolTransfer]] = None,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> PoolTransferResult:
        raise NotImplementedError()

    def batch_get_v2(
        self, transfers: List[PoolTransfer], extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> dict:
        raise NotImplementedError()

    def batch_set_v2(
        self, transfers: List[PoolTransfer], extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> dict:
        raise NotImplementedError()

    # ---- v1 zero-copy; base raises (real comment: a None here kills the daemon thread) ----
    def batch_get_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        """Read len(keys) pages into the host pool at host_indices (page_size slots per
        key). Returns one bool per key."""
        raise NotImplementedError()

    def batch_set_v1(
        self,
        keys: List[str],
        host_indices: torch.Tensor,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> List[bool]:
        """Write len(keys) pages from the host pool at host_indices. One bool per key."""
        raise NotImplementedError()

    # ---- legacy (generic path); abstract ----
    @abstractmethod
    def get(
        self,
        key: str,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> torch.Tensor | None:
        """Value of `key` (filled into target_location), or None if absent."""

    @abstractmethod
    def batch_get(
        self,
        keys: List[str],
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> List[torch.Tensor | None] | int:
        """One tensor-or-None per key."""

    @abstractmethod
    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        """True on success."""

    @abstractmethod
    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        """True iff every key was stored."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """True if key is stored."""

    def batch_exists(
        self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> int:
        """Number of consecutive existing keys counted from keys[0]."""
        n = 0
        for k in keys:
            if not self.exists(k):
                break
            n += 1
        return n

    def clear(self) -> None:
        pass

    def get_stats(self):
        return None


class HiCacheFile(HiCacheStorage):
    """Minimal stand-in for the built-in "file" backend: one <key><suffix>.bin per page.
    Suffix: _{model} plus _{tp_rank}_{tp_size} unless MLA, _{pp_size}_{pp_rank} if pp>1,
    _cp{rank}_{size} if attn_cp_size>1. No LRU evictor / metadata cache."""

    def __init__(self, storage_config: HiCacheStorageConfig, file_path: str = "/tmp/hicache"):
        self.file_path = os.getenv("SGLANG_HICACHE_FILE_BACKEND_STORAGE_DIR") or file_path
        c = storage_config
        model = "-".join(c.model_name.split("/")) if c.model_name else ""
        self.config_suffix = f"_{model}"
        if not c.is_mla_model:
            self.config_suffix += f"_{c.tp_rank}_{c.tp_size}"
        if c.pp_size > 1:
            self.config_suffix += f"_{c.pp_size}_{c.pp_rank}"
        if c.attn_cp_size > 1:
            self.config_suffix += f"_cp{c.attn_cp_rank}_{c.attn_cp_size}"
        os.makedirs(self.file_path, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.file_path, f"{key}{self.config_suffix}.bin")

    def get(self, key, target_location=None, target_sizes=None):
        try:
            with open(self._path(key), "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        dst = target_location.view(torch.uint8).reshape(-1)
        if len(data) != dst.numel():
            raise IOError(f"Short read for {key}")
        dst.copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))
        return target_location

    def batch_get(self, keys, target_locations=None, target_sizes=None):
        locs = target_locations or [None] * len(keys)
        return [self.get(k, t) for k, t in zip(keys, locs)]

    def set(self, key, value=None, target_location=None, target_sizes=None):
        if self.exists(key):
            return True
        try:
            tmp = self._path(key) + f".tmp.{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(value.contiguous().view(torch.uint8).numpy().tobytes())
            os.replace(tmp, self._path(key))
            return True
        except Exception as e:  # mirrors real: log and report failure
            logger.error("Failed to save tensor %s: %s", key, e)
            return False

    def batch_set(self, keys, values=None, target_locations=None, target_sizes=None):
        return all(self.set(k, v) for k, v in zip(keys, values))

    def exists(self, key):
        return os.path.exists(self._path(key))

    def clear(self) -> bool:
        for name in os.listdir(self.file_path):
            p = os.path.join(self.file_path, name)
            if os.path.isfile(p):
                os.remove(p)
        return True
