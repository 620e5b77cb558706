# Test double of lmcache/v1/storage_backend/__init__.py (LMCache/LMCache, dev branch as indexed:
# `storage_plugin_launcher` + `CreateStorageBackends(config, metadata, loop, dst_device, lmcache_worker,
# skip_backends, existing_backends)`; the older `create_dynamic_backends` / `external_backends`
# variant is @ 5f6f05bd72190f583a5aea11cd58756c98925dc8). NOT the real LMCache; own code.
# Only LocalCPUBackend, RemoteBackend (remote_storage_plugins / remote_url) and storage plugins
# are built; PD/P2P/disk/GDS/NIXL/Maru/audit are out of scope for the double.
from __future__ import annotations

from collections import OrderedDict
from typing import AbstractSet, Any, Optional
import asyncio
import importlib

from lmcache import torch_dev, torch_device_type
from lmcache.logging import init_logger
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.abstract_backend import StorageBackendInterface
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend
from lmcache.v1.storage_backend.remote_backend import RemoteBackend  # noqa: F401

logger = init_logger(__name__)


def is_cuda_worker(metadata: LMCacheMetadata) -> bool:
    return metadata.role != "scheduler" and torch_dev.is_available()


def storage_plugin_launcher(
    config: LMCacheEngineConfig,
    metadata: LMCacheMetadata,
    loop: asyncio.AbstractEventLoop,
    local_cpu_backend: Optional[LocalCPUBackend],
    dst_device: str,
    storage_backends: "OrderedDict[str, StorageBackendInterface]",
) -> None:
    """For each name in config.storage_plugins: import
    extra_config['storage_plugin.<name>.module_path'], take attribute
    extra_config['storage_plugin.<name>.class_name'], construct it with keyword
    args (config, dst_device, metadata, local_cpu_backend, loop) and register it
    as storage_backends[<name>]. Errors are logged, never raised (as in LMCache)."""
    plugins = set(config.storage_plugins) if config.storage_plugins else set()
    if not plugins or not config.extra_config:
        if plugins:
            logger.warning("storage_plugins=%s set but extra_config is empty", sorted(plugins))
        return
    for name in plugins:
        try:
            module_path = config.extra_config.get(f"storage_plugin.{name}.module_path")
            class_name = config.extra_config.get(f"storage_plugin.{name}.class_name")
            if not module_path or not class_name:
                logger.warning("Backend %s missing module_path or class_name", name)
                continue
            cls = getattr(importlib.import_module(module_path), class_name)
            storage_backends[name] = cls(
                config=config,
                dst_device=dst_device,
                metadata=metadata,
                local_cpu_backend=local_cpu_backend,
                loop=loop,
            )
        except Exception as e:
            logger.error("Failed to create backend %s: %s", name, e)


def CreateStorageBackends(
    config: LMCacheEngineConfig,
    metadata: LMCacheMetadata,
    loop: asyncio.AbstractEventLoop,
    dst_device: str = torch_device_type,
    lmcache_worker: Any = None,
    skip_backends: Optional[AbstractSet[str]] = None,
    existing_backends: Optional["OrderedDict[str, StorageBackendInterface]"] = None,
) -> "OrderedDict[str, StorageBackendInterface]":
    dst_device = (f"{torch_device_type}:{torch_dev.current_device()}"
                  if is_cuda_worker(metadata) else "cpu")
    skip = skip_backends or set()
    backends: "OrderedDict[str, StorageBackendInterface]" = OrderedDict()

    local_cpu_backend: Optional[LocalCPUBackend] = None
    if existing_backends and isinstance(existing_backends.get("LocalCPUBackend"), LocalCPUBackend):
        local_cpu_backend = existing_backends["LocalCPUBackend"]
    if metadata.role != "scheduler" and (not config.enable_pd or config.local_cpu):
        if "LocalCPUBackend" not in skip and config.max_local_cpu_size > 0:
            local_cpu_backend = LocalCPUBackend(config, metadata, dst_device, lmcache_worker)
            backends[str(local_cpu_backend)] = local_cpu_backend

    if config.remote_storage_plugins and "RemoteBackend" not in skip:
        for plugin_name in config.remote_storage_plugins:
            assert local_cpu_backend is not None, "Remote backend requires local CPU backend"
            try:
                backends["RemoteBackend-%s" % plugin_name] = RemoteBackend(
                    config, metadata, loop, local_cpu_backend, dst_device,
                    plugin_name=plugin_name)
            except Exception as e:
                logger.error("Failed to create remote backend for plugin %s: %s",
                             plugin_name, e)

    if config.remote_url is not None and "RemoteBackend" not in skip:
        rb = RemoteBackend(config, metadata, loop, local_cpu_backend, dst_device)
        backends[str(rb)] = rb

    if not config.enable_pd or config.local_cpu:
        storage_plugin_launcher(config, metadata, loop, local_cpu_backend, dst_device, backends)
    return backends
