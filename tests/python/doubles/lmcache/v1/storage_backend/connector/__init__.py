# Test double of lmcache/v1/storage_backend/connector/__init__.py (LMCache/LMCache, dev branch as indexed:
# ConnectorManager with builtin `*_adapter` discovery + `remote_storage_plugins` plugin launcher and
# DynamicConnectorAdapter; older discovery-only variant @ e23f2bbc1ad84d4d98fe17672a875db50b704ab9).
# NOT the real LMCache; own code with the same names, signatures and dispatch rules.
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Dict, List, Optional
from urllib.parse import parse_qs, urlparse
import asyncio
import importlib
import inspect
import pkgutil

from lmcache.logging import init_logger
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector
from lmcache.v1.storage_backend.connector.instrumented_connector import (
    InstrumentedRemoteConnector,
)
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

logger = init_logger(__name__)


@dataclass
class ParsedRemoteURL:
    host: str
    port: int
    path: str
    username: Optional[str] = None
    password: Optional[str] = None
    query_params: Dict[str, List[str]] = field(default_factory=dict)


def parse_remote_url(url: str) -> ParsedRemoteURL:
    p = urlparse(url)
    if p.hostname is None or p.port is None:
        raise AssertionError(f"Invalid URL {url}: missing host or port")
    return ParsedRemoteURL(host=p.hostname, port=p.port, path=p.path or "",
                           username=p.username, password=p.password,
                           query_params=parse_qs(p.query) if p.query else {})


def extract_plugin_type(plugin_name: str) -> str:
    """'fs.primary' -> 'fs'."""
    return plugin_name.split(".", 1)[0]


class ConnectorContext:
    def __init__(self, url: str, loop: asyncio.AbstractEventLoop,
                 local_cpu_backend: Optional[LocalCPUBackend],
                 config: Optional[LMCacheEngineConfig],
                 metadata: Optional[LMCacheMetadata],
                 plugin_name: Optional[str] = None):
        self.url = url
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        self.config = config
        self.metadata = metadata
        self.plugin_name = plugin_name

    def get_full_chunk_size_bytes(self) -> int:
        return self.local_cpu_backend.get_full_chunk_size_bytes()


class ConnectorAdapter(ABC):
    def __init__(self, schema: str = "") -> None:
        self.schema = schema

    def can_parse(self, url: str) -> bool:
        return self.schema != "" and url.startswith(self.schema)

    @abstractmethod
    def create_connector(self, context: ConnectorContext) -> RemoteConnector: ...


class DynamicConnectorAdapter(ConnectorAdapter):
    """Wraps a RemoteConnector subclass named by remote_storage_plugin.<name>.class_name.
    Matches 'plugin://<type>' URLs; builds cls(loop=, local_cpu_backend=, config=)."""

    def __init__(self, plugin_name: str, connector_class: type) -> None:
        super().__init__("plugin://%s" % extract_plugin_type(plugin_name))
        self._plugin_name = plugin_name
        self._connector_class = connector_class

    def can_parse(self, url: str) -> bool:
        if url.startswith(self.schema):
            return True
        if url.startswith("plugin://"):
            return (extract_plugin_type(url[len("plugin://"):])
                    == extract_plugin_type(self._plugin_name))
        return False

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        return self._connector_class(loop=context.loop,
                                     local_cpu_backend=context.local_cpu_backend,
                                     config=context.config)


class ConnectorManager:
    def __init__(self, url: str, loop: asyncio.AbstractEventLoop,
                 local_cpu_backend: Optional[LocalCPUBackend],
                 config: Optional[LMCacheEngineConfig] = None,
                 metadata: Optional[LMCacheMetadata] = None,
                 plugin_name: Optional[str] = None) -> None:
        self.context = ConnectorContext(url, loop, local_cpu_backend, config, metadata,
                                        plugin_name)
        self.adapters: List[ConnectorAdapter] = []
        self._remote_adapters_builtin_launcher()
        self._remote_adapters_plugin_launcher(config)

    def _remote_adapters_builtin_launcher(self) -> None:
        """Every ConnectorAdapter subclass in modules `<pkg>.*_adapter`."""
        pkg = importlib.import_module(__name__)
        for info in pkgutil.iter_modules(pkg.__path__):
            name = info.name
            if name.startswith("_") or not name.endswith("_adapter"):
                continue
            try:
                mod = importlib.import_module(f"{__name__}.{name}")
            except ImportError as e:
                logger.warning("Failed to import %s: %s", name, e)
                continue
            for _, obj in inspect.getmembers(mod, inspect.isclass):
                if (issubclass(obj, ConnectorAdapter) and obj is not ConnectorAdapter
                        and not inspect.isabstract(obj) and obj is not DynamicConnectorAdapter):
                    try:
                        self.adapters.append(obj())
                    except Exception as e:
                        logger.error("Failed to instantiate adapter %s: %s", obj, e)

    def _remote_adapters_plugin_launcher(self, config: Optional[LMCacheEngineConfig]) -> None:
        if config is None or not config.remote_storage_plugins:
            return
        extra = config.extra_config or {}
        for plugin in set(config.remote_storage_plugins):
            module_path = extra.get("remote_storage_plugin.%s.module_path" % plugin)
            class_name = extra.get("remote_storage_plugin.%s.class_name" % plugin)
            if not module_path or not class_name:
                if not any(a.can_parse("plugin://%s" % plugin) for a in self.adapters):
                    logger.warning("Remote connector %s missing module_path or class_name",
                                   plugin)
                continue
            try:
                cls = getattr(importlib.import_module(module_path), class_name)
            except (ImportError, AttributeError) as e:
                logger.error("Failed to load remote connector %s: %s", plugin, e)
                continue
            if inspect.isclass(cls) and issubclass(cls, ConnectorAdapter):
                self.adapters.append(cls())
            elif inspect.isclass(cls) and issubclass(cls, RemoteConnector):
                self.adapters.append(DynamicConnectorAdapter(plugin, cls))
            else:
                logger.warning("%s is neither ConnectorAdapter nor RemoteConnector", class_name)

    def create_connector(self) -> RemoteConnector:
        for adapter in self.adapters:
            if adapter.can_parse(self.context.url):
                return adapter.create_connector(self.context)
        raise ValueError(f"No adapter found for URL: {self.context.url}")


def CreateConnector(url: str, loop: asyncio.AbstractEventLoop,
                    local_cpu_backend: Optional[LocalCPUBackend],
                    config: Optional[LMCacheEngineConfig] = None,
                    metadata: Optional[LMCacheMetadata] = None,
                    plugin_name: Optional[str] = None) -> InstrumentedRemoteConnector:
    if "://" not in url:
        raise ValueError(f"Invalid remote url {url}: missing scheme")
    manager = ConnectorManager(url, loop, local_cpu_backend, config, metadata, plugin_name)
    return InstrumentedRemoteConnector(manager.create_connector())
