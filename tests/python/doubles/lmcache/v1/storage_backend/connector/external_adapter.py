# Test double of lmcache/v1/storage_backend/connector/external_adapter.py
# (LMCache/LMCache @ 0c4184dab7b7ff92a1b1aae12124ef357848f4c8). NOT the real LMCache; own code.
# URL: external://host:port/<module.path>/?connector_name=<ClassName>
import importlib

from lmcache.v1.storage_backend.connector import (
    ConnectorAdapter, ConnectorContext, parse_remote_url,
)
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector


class ExternalConnectorAdapter(ConnectorAdapter):
    def __init__(self) -> None:
        super().__init__("external://")

    def create_connector(self, context: ConnectorContext) -> RemoteConnector:
        if len(context.url.split(",")) > 1:
            raise ValueError("Only one host is supported for external connector")
        parsed = parse_remote_url(context.url)
        module_path = parsed.path.strip("/")
        name = parsed.query_params.get("connector_name", [""])[0]
        if not name:
            raise ValueError("External connector requires 'connector_name' in query parameters")
        cls = getattr(importlib.import_module(module_path), name)
        if not issubclass(cls, RemoteConnector):
            raise TypeError(f"{name} must be a subclass of RemoteConnector")
        return cls(loop=context.loop, local_cpu_backend=context.local_cpu_backend,
                   config=context.config)
