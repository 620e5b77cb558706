# Test double of lmcache/v1/storage_backend/remote_backend.py (LMCache/LMCache; semantics from the indexed
# version @ 009eca101c71ae583489ed4bc616c589f2edcdf7 plus the newer `plugin_name=` parameter used by
# CreateStorageBackends for remote_storage_plugins). NOT the real LMCache: no serde (naive == identity),
# no MLA worker-0 mode, no monitor thread. Drives a RemoteConnector via run_coroutine_threadsafe(loop).
from __future__ import annotations

from concurrent.futures import Future
from typing import Any, List, Optional, Sequence, Set
import asyncio
import threading

from lmcache import torch_device_type
from lmcache.logging import init_logger
from lmcache.utils import CacheEngineKey
from lmcache.v1.memory_management import MemoryObj
from lmcache.v1.storage_backend.abstract_backend import StorageBackendInterface
from lmcache.v1.storage_backend.connector import CreateConnector

logger = init_logger(__name__)


class RemoteBackend(StorageBackendInterface):
    def __init__(self, config, metadata, loop: asyncio.AbstractEventLoop, local_cpu_backend,
                 dst_device: str = torch_device_type, plugin_name: Optional[str] = None):
        super().__init__(dst_device="cpu" if torch_device_type == "cpu" else dst_device)
        self.config, self.metadata, self.loop = config, metadata, loop
        self.local_cpu_backend = local_cpu_backend
        self.plugin_name = plugin_name
        self.blocking_timeout_secs = config.blocking_timeout_secs
        self.put_tasks: Set[CacheEngineKey] = set()
        self.lock = threading.Lock()
        url = ("plugin://%s" % plugin_name) if plugin_name else config.remote_url
        assert url is not None
        self.connection = CreateConnector(url, loop, local_cpu_backend, config, metadata,
                                          plugin_name)

    def __str__(self):
        return self.__class__.__name__

    def _run(self, coro, timeout=None):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def contains(self, key: CacheEngineKey, pin: bool = False) -> bool:
        try:
            if self.config.get_extra_config_value("use_exists_sync", False):
                return self.connection.exists_sync(key)
            return bool(self._run(self.connection.exists(key)))
        except Exception as e:
            logger.warning("Remote connection failed in contains: %s", e)
            return False

    def exists_in_put_tasks(self, key: CacheEngineKey) -> bool:
        with self.lock:
            return key in self.put_tasks

    def batched_submit_put_task(self, keys: Sequence[CacheEngineKey], memory_objs: List[MemoryObj],
                                transfer_spec: Any = None, on_complete_callback=None):
        futures: List[Future] = []
        keys = list(keys)
        with self.lock:
            todo = [(k, o) for k, o in zip(keys, memory_objs) if k not in self.put_tasks]
            self.put_tasks.update(k for k, _ in todo)
        for _, o in todo:
            o.ref_count_up()  # held until the async put finishes

        def done(f, pairs):
            with self.lock:
                self.put_tasks.difference_update(k for k, _ in pairs)
            for k, o in pairs:
                o.ref_count_down()
                if on_complete_callback is not None and f.exception() is None:
                    try:
                        on_complete_callback(k)
                    except Exception as e:
                        logger.warning("on_complete_callback failed: %s", e)

        if todo and self.connection.support_batched_put():
            f = asyncio.run_coroutine_threadsafe(
                self.connection.batched_put([k for k, _ in todo], [o for _, o in todo]),
                self.loop)
            f.add_done_callback(lambda f, p=todo: done(f, p))
            futures.append(f)
        else:
            for k, o in todo:
                f = asyncio.run_coroutine_threadsafe(self.connection.put(k, o), self.loop)
                f.add_done_callback(lambda f, p=[(k, o)]: done(f, p))
                futures.append(f)
        return futures

    def get_blocking(self, key: CacheEngineKey) -> Optional[MemoryObj]:
        if self.local_cpu_backend is None:
            return None
        try:
            return self._run(self.connection.get(key), self.blocking_timeout_secs)
        except Exception as e:
            logger.warning("Error occurred in get_blocking: %s", e)
            return None

    def batched_get_blocking(self, keys: List[CacheEngineKey]) -> List[Optional[MemoryObj]]:
        if self.connection.support_batched_get():
            try:
                return self._run(self.connection.batched_get(keys), self.blocking_timeout_secs)
            except Exception as e:
                logger.warning("Error occurred in batched_get_blocking: %s", e)
                return [None] * len(keys)
        return [self.get_blocking(k) for k in keys]

    async def batched_async_contains(self, lookup_id, keys, pin=False) -> int:
        return await self.connection.batched_async_contains(lookup_id, keys, pin)

    async def batched_get_non_blocking(self, lookup_id, keys, transfer_spec=None):
        return await self.connection.batched_get_non_blocking(lookup_id, keys)

    def pin(self, key) -> bool:
        return False

    def unpin(self, key) -> bool:
        return False

    def remove(self, key, force: bool = True) -> bool:
        try:
            return bool(self.connection.remove_sync(key))
        except NotImplementedError:
            return False

    def get_allocator_backend(self):
        return self.local_cpu_backend

    def close(self) -> None:
        try:
            self._run(self.connection.close(), 5)
        except Exception as e:
            logger.warning("close failed: %s", e)
