# Test double of lmcache/v1/storage_backend/connector/instrumented_connector.py (LMCache/LMCache, dev).
# NOT the real LMCache: a transparent delegating wrapper (no metrics).
from lmcache.v1.storage_backend.connector.base_connector import RemoteConnector


class InstrumentedRemoteConnector:
    """CreateConnector() returns this wrapper; every attribute forwards to the connector."""

    def __init__(self, connector: RemoteConnector):
        self._connector = connector

    def getWrappedConnector(self) -> RemoteConnector:
        return self._connector

    def __getattr__(self, name):
        return getattr(self._connector, name)

    def __repr__(self):
        return f"InstrumentedRemoteConnector({self._connector!r})"
