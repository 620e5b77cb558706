# Test double of lmcache/v1/storage_backend/connector/base_connector.py (LMCache/LMCache, dev branch as
# indexed: RemoteConnector.__init__(config, metadata) + NotAudit; older init_chunk_meta() variant
# @ 01712fbd51d033060d6a8851c06de0ebf351f74e). NOT the real LMCache; own code.
from __future__ import annotations

from typing import List, Optional
import abc
import asyncio

import torch

from lmcache.logging import init_logger
from lmcache.utils import CacheEngineKey, get_size_bytes
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryFormat, MemoryObj
from lmcache.v1.metadata import LMCacheMetadata

logger = init_logger(__name__)


def NotAudit(func):
    """Marks a method that the audit wrapper forwards without logging."""
    func._not_audit = True
    return func


class RemoteConnector(metaclass=abc.ABCMeta):
    """Remote KV store connector. Subclasses may call
    ``super().__init__(config, metadata)`` to get the chunk-geometry fields."""

    save_chunk_meta: bool = True
    meta_shapes: Optional[list] = None
    meta_dtypes: Optional[list] = None
    meta_fmt: Optional[MemoryFormat] = None
    full_chunk_size_bytes: Optional[int] = None
    single_token_size: Optional[int] = None

    def __init__(self, config: Optional[LMCacheEngineConfig] = None,
                 metadata: Optional[LMCacheMetadata] = None):
        if config is None or metadata is None:
            return
        extra = config.extra_config
        self.save_chunk_meta = bool(extra is None or extra.get("save_chunk_meta", True)
                                    or config.use_layerwise)
        self.meta_shapes = metadata.get_shapes()
        self.meta_dtypes = metadata.get_dtypes()
        self.meta_fmt = MemoryFormat.KV_MLA_FMT if metadata.use_mla else MemoryFormat.KV_2LTD
        self.full_chunk_size_bytes = get_size_bytes(self.meta_shapes, self.meta_dtypes)
        self.single_token_size = self.full_chunk_size_bytes // metadata.chunk_size

    @NotAudit
    def reshape_partial_chunk(self, memory_obj: MemoryObj, bytes_read: int) -> MemoryObj:
        """Shrink a full-chunk MemoryObj to the tokens actually read."""
        full, tok = self.full_chunk_size_bytes, self.single_token_size
        assert full is not None and tok is not None
        if bytes_read == 0 or bytes_read % tok != 0 or bytes_read > full:
            raise ValueError(f"bytes_read: {bytes_read} is illegal")
        if bytes_read == full:
            return memory_obj
        shape = list(memory_obj.meta.shape)
        shape[2] = bytes_read // tok
        memory_obj.raw_data = memory_obj.raw_data[:bytes_read]
        memory_obj.meta.shape = torch.Size(shape)
        if memory_obj.meta.shapes:
            memory_obj.meta.shapes = [torch.Size(shape)]
        return memory_obj

    @NotAudit
    def post_init(self):
        return None

    # ---------------- abstract -----------------
    @abc.abstractmethod
    async def exists(self, key: CacheEngineKey) -> bool: ...

    @abc.abstractmethod
    def exists_sync(self, key: CacheEngineKey) -> bool: ...

    @abc.abstractmethod
    async def get(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        """Allocate from local_cpu_backend, fill, return (caller owns the ref); None if absent."""

    @abc.abstractmethod
    async def put(self, key: CacheEngineKey, memory_obj: MemoryObj):
        """Store memory_obj's bytes under key."""

    @abc.abstractmethod
    async def list(self) -> List[str]: ...

    @abc.abstractmethod
    async def close(self): ...

    # ---------------- optional -----------------
    def support_ping(self) -> bool:
        return False

    async def ping(self) -> int:
        raise NotImplementedError

    def support_batched_get(self) -> bool:
        return False

    async def batched_get(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        raise NotImplementedError

    def support_batched_put(self) -> bool:
        return False

    async def batched_put(self, keys: List[CacheEngineKey], memory_objs: List[MemoryObj]):
        raise NotImplementedError

    def support_batched_async_contains(self) -> bool:
        return True

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey],
                                     pin: bool = False) -> int:
        results = await asyncio.gather(*(self.exists(k) for k in keys))
        return results.index(False) if False in results else len(results)

    def support_batched_get_non_blocking(self) -> bool:
        return True

    async def batched_get_non_blocking(self, lookup_id: str,
                                       keys: List[CacheEngineKey]) -> List[MemoryObj]:
        """Consecutive prefix of hits; objs after the first miss are released."""
        results = await asyncio.gather(*(self.get(k) for k in keys), return_exceptions=True)
        out: List[MemoryObj] = []
        broken = False
        for r in results:
            if broken:
                if isinstance(r, MemoryObj):
                    r.ref_count_down()
            elif isinstance(r, MemoryObj):
                out.append(r)
            else:
                broken = True
        return out

    def remove_sync(self, key: CacheEngineKey) -> bool:
        raise NotImplementedError

    def support_batched_contains(self) -> bool:
        return False

    def batched_contains(self, keys: List[CacheEngineKey]) -> int:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{self.__class__.__name__}>"
