# Test double of lmcache/v1/storage_backend/local_cpu_backend.py (LMCache/LMCache, dev branch as indexed).
# NOT the real LMCache. Keeps the public surface a plugin/connector uses: allocate/batched_allocate
# (shapes, dtypes, [batch_size,] fmt=None, eviction=True, busy_loop=True), memory_allocator
# (a MixedMemoryAllocator with .pin_allocator.buffer), get_full_chunk_size_bytes, hot cache ops.
# Eviction: synchronous LRU over can_evict objects; no background thread, no controller.
from __future__ import annotations

from collections import OrderedDict
from concurrent.futures import Future
from typing import Any, Callable, List, Optional, Sequence
import threading

from lmcache import torch_device_type
from lmcache.logging import init_logger
from lmcache.utils import CacheEngineKey, get_size_bytes
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import (
    MemoryAllocatorInterface, MemoryFormat, MemoryObj, MixedMemoryAllocator,
)
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.abstract_backend import AllocatorBackendInterface

logger = init_logger(__name__)


class LocalCPUBackend(AllocatorBackendInterface):
    def __init__(
        self,
        config: LMCacheEngineConfig,
        metadata: Optional[LMCacheMetadata] = None,
        dst_device: str = torch_device_type,
        lmcache_worker: Any = None,
        memory_allocator: Optional[MemoryAllocatorInterface] = None,
        global_kvclient: Any = None,
    ):
        super().__init__("cpu" if dst_device.startswith("cuda") and
                         torch_device_type == "cpu" else dst_device)
        assert metadata is not None or memory_allocator is not None
        self.config = config
        self.metadata = metadata
        self.use_hot = config.local_cpu
        self.layerwise = config.use_layerwise
        self.enable_blending = config.enable_blending
        self.lmcache_worker = lmcache_worker
        self.hot_cache: "OrderedDict[CacheEngineKey, MemoryObj]" = OrderedDict()
        self.cpu_lock = threading.Lock()
        self.keys_in_request: List[CacheEngineKey] = []
        self.memory_allocator = (memory_allocator if memory_allocator is not None
                                 else self.initialize_allocator(config, metadata))

    def __str__(self):
        return self.__class__.__name__

    # ---- allocator side -------------------------------------------------
    def initialize_allocator(self, config, metadata) -> MemoryAllocatorInterface:
        size = int(config.max_local_cpu_size * 1024 ** 3)
        return MixedMemoryAllocator(size)

    def get_memory_allocator(self) -> MemoryAllocatorInterface:
        return self.memory_allocator

    def get_allocator_backend(self):
        return self

    def _default_fmt(self) -> MemoryFormat:
        if self.layerwise:
            return MemoryFormat.KV_2TD if self.enable_blending else MemoryFormat.KV_T2D
        return MemoryFormat.KV_2LTD

    def _evict_one(self) -> bool:
        with self.cpu_lock:
            for key, obj in self.hot_cache.items():
                if obj.can_evict:
                    self.hot_cache.pop(key)
                    break
            else:
                return False
        obj.ref_count_down()
        return True

    def allocate(self, shapes, dtypes, fmt: Optional[MemoryFormat] = None,
                 eviction: bool = True, busy_loop: bool = True) -> Optional[MemoryObj]:
        fmt = fmt or self._default_fmt()
        while True:
            obj = self.memory_allocator.allocate(shapes, dtypes, fmt)
            if obj is not None or not eviction or not self._evict_one():
                return obj

    def batched_allocate(self, shapes, dtypes, batch_size: int,
                         fmt: Optional[MemoryFormat] = None, eviction: bool = True,
                         busy_loop: bool = True) -> Optional[List[MemoryObj]]:
        fmt = fmt or self._default_fmt()
        while True:
            objs = self.memory_allocator.batched_allocate(shapes, dtypes, batch_size, fmt)
            if objs is not None or not eviction or not self._evict_one():
                return objs

    def get_full_chunk_size_bytes(self) -> int:
        assert self.metadata is not None, "metadata required"
        return get_size_bytes(self.metadata.get_shapes(), self.metadata.get_dtypes())

    def calculate_chunk_budget(self) -> int:
        align = self.memory_allocator.align_bytes
        chunk = self.get_full_chunk_size_bytes()
        return int(self.config.max_local_cpu_size * 1024 ** 3) // ((chunk + align - 1) // align * align)

    # ---- hot cache side -------------------------------------------------
    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        with self.cpu_lock:
            obj = self.hot_cache.get(key)
            if obj is None:
                return False
            if pin:
                obj.pin()
                self.keys_in_request.append(key)
            return True

    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        return False

    def submit_put_task(self, key, memory_obj, on_complete_callback=None) -> Optional[Future]:
        with self.cpu_lock:
            if key in self.hot_cache:
                return None
            memory_obj.ref_count_up()
            self.hot_cache[key] = memory_obj
        if on_complete_callback is not None:
            try:
                on_complete_callback(key)
            except Exception as e:  # real code logs and continues
                logger.warning("on_complete_callback failed: %s", e)
        return None

    def batched_submit_put_task(self, keys: Sequence[CacheEngineKey], memory_objs: List[MemoryObj],
                                transfer_spec: Any = None,
                                on_complete_callback: Optional[Callable] = None) -> None:
        if not self.use_hot:
            return None
        for k, o in zip(keys, memory_objs):
            self.submit_put_task(k, o, on_complete_callback=on_complete_callback)
        return None

    def get_blocking(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        with self.cpu_lock:
            obj = self.hot_cache.get(key)
            if obj is None:
                return None
            self.hot_cache.move_to_end(key)
            obj.ref_count_up()
            return obj

    async def batched_get_non_blocking(self, lookup_id, keys, transfer_spec=None):
        out = []
        with self.cpu_lock:
            for k in keys:
                o = self.hot_cache[k]
                o.ref_count_up()
                out.append(o)
        return out

    async def batched_async_contains(self, lookup_id, keys, pin=False) -> int:
        return self.batched_contains(keys, pin)

    def pin(self, key: CacheEngineKey) -> bool:
        with self.cpu_lock:
            obj = self.hot_cache.get(key)
        return obj.pin() if obj is not None else False

    def unpin(self, key: CacheEngineKey) -> bool:
        with self.cpu_lock:
            obj = self.hot_cache.get(key)
        return obj.unpin() if obj is not None else False

    def remove(self, key: CacheEngineKey, force: bool = True) -> bool:
        with self.cpu_lock:
            obj = self.hot_cache.pop(key, None)
        if obj is None:
            return False
        obj.ref_count_down()
        return True

    def touch_cache(self):
        with self.cpu_lock:
            for k in reversed(self.keys_in_request):
                if k in self.hot_cache:
                    self.hot_cache.move_to_end(k)
            self.keys_in_request = []

    def get_keys(self) -> List[CacheEngineKey]:
        with self.cpu_lock:
            return list(self.hot_cache.keys())

    def clear(self) -> int:
        n = 0
        for k in self.get_keys():
            with self.cpu_lock:
                obj = self.hot_cache.get(k)
            if obj is not None and obj.can_evict:
                n += obj.get_num_tokens()
                self.remove(k)
        return n

    def close(self) -> None:
        self.clear()
        self.memory_allocator.close()
