# Test double of lmcache/v1/storage_backend/abstract_backend.py (LMCache/LMCache, dev branch as indexed:
# the version with get_allocator_backend(), on_complete_callback and StoragePluginInterface;
# older snapshot for comparison @ 2bbf159471becbc5b373f911c9370ddec82e39c2).
# NOT the real LMCache. Abstract set and signatures mirror the real one; bodies are our own.
from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Sequence, Union
import abc
import asyncio

import torch

from lmcache import torch_device_type
from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryAllocatorInterface, MemoryFormat, MemoryObj
from lmcache.v1.metadata import LMCacheMetadata

if TYPE_CHECKING:
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend


class StorageBackendInterface(metaclass=abc.ABCMeta):
    def __init__(self, dst_device: str = torch_device_type):
        torch.device(dst_device)  # raises RuntimeError on an invalid device string
        self.dst_device = dst_device

    # ---------------- abstract -----------------
    @abc.abstractmethod
    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        """True if key is stored; pin=True also pins it (lookup pin)."""

    @abc.abstractmethod
    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        """True while a put of key is in flight."""

    @abc.abstractmethod
    def batched_submit_put_task(
        self,
        keys: Sequence[CacheEngineKey],
        objs: List[MemoryObj],
        transfer_spec: Any = None,
        on_complete_callback: Optional[Callable[[CacheEngineKey], None]] = None,
    ) -> Union[List[Future], None]:
        """Store objs under keys (async allowed). Callback once per finished key.
        Returns futures if asynchronous, else None."""

    @abc.abstractmethod
    def get_blocking(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        """Return a MemoryObj (caller owns one reference) or None."""

    @abc.abstractmethod
    def pin(self, key: CacheEngineKey) -> bool: ...

    @abc.abstractmethod
    def unpin(self, key: CacheEngineKey) -> bool: ...

    @abc.abstractmethod
    def remove(self, key: CacheEngineKey, force: bool = True) -> bool: ...

    @abc.abstractmethod
    def get_allocator_backend(self) -> "AllocatorBackendInterface":
        """Backend whose allocate() is used for MemoryObjs returned by get."""

    @abc.abstractmethod
    def close(self) -> None: ...

    # ---------------- optional (raise / default like the real one) -----------
    async def async_batched_submit_put_task(self, keys, objs, transfer_spec=None,
                                            on_complete_callback=None) -> None:
        raise NotImplementedError

    def get_non_blocking(self, key: CacheEngineKey,
                         location: Optional[str] = None) -> Optional[Future]:
        raise NotImplementedError

    async def batched_async_contains(self, lookup_id: str, keys: List[CacheEngineKey],
                                     pin: bool = False) -> int:
        raise NotImplementedError

    async def batched_get_non_blocking(self, lookup_id: str, keys: list[CacheEngineKey],
                                       transfer_spec: Any = None) -> list[MemoryObj]:
        raise NotImplementedError

    def batched_get_blocking(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        return [self.get_blocking(k) for k in keys]

    def batched_remove(self, keys: list[CacheEngineKey], force: bool = True) -> int:
        return sum(1 for k in keys if self.remove(k, force=force))

    def batched_contains(self, keys: List[CacheEngineKey], pin: bool = False) -> int:
        """Prefix hit count."""
        n = 0
        for k in keys:
            if not self.contains(k, pin):
                break
            n += 1
        return n

    def touch_cache(self) -> None:
        raise NotImplementedError

    def cancel_request(self, req_id: str) -> None:
        return


class AllocatorBackendInterface(StorageBackendInterface):
    @abc.abstractmethod
    def initialize_allocator(self, config: LMCacheEngineConfig,
                             metadata: LMCacheMetadata) -> MemoryAllocatorInterface: ...

    @abc.abstractmethod
    def get_memory_allocator(self) -> MemoryAllocatorInterface: ...

    @abc.abstractmethod
    def allocate(self, shapes, dtypes, fmt: MemoryFormat = MemoryFormat.KV_2LTD,
                 eviction: bool = True, busy_loop: bool = True) -> Optional[MemoryObj]: ...

    @abc.abstractmethod
    def batched_allocate(self, shapes, dtypes, batch_size: int,
                         fmt: MemoryFormat = MemoryFormat.KV_2LTD, eviction: bool = True,
                         busy_loop: bool = True) -> Optional[list[MemoryObj]]: ...

    def calculate_chunk_budget(self) -> int:
        raise NotImplementedError


class StoragePluginInterface(StorageBackendInterface):
    """Base class for backends loaded via `storage_plugins` (constructed with kwargs
    config=, dst_device=, metadata=, local_cpu_backend=, loop=)."""

    def __init__(
        self,
        dst_device: str = torch_device_type,
        config: Optional[LMCacheEngineConfig] = None,
        metadata: Optional[LMCacheMetadata] = None,
        local_cpu_backend: Optional["LocalCPUBackend"] = None,
        loop: Optional[asyncio.AbstractEventLoop] = None,
    ):
        super().__init__(dst_device=dst_device)
        self.config = config
        self.metadata = metadata
        self.local_cpu_backend = local_cpu_backend
        self.loop = loop


# Backwards-compatible alias present in real LMCache.
ConfigurableStorageBackendInterface = StoragePluginInterface
