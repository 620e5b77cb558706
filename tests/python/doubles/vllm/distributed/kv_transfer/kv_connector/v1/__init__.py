# TEST DOUBLE (tierkv tests), not vLLM. Mirrors the re-exports of
# vllm/distributed/kv_transfer/kv_connector/v1/__init__.py (vllm-project/vllm).
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorRole,
    SupportsHMA,
    supports_hma,
)

__all__ = ["KVConnectorRole", "KVConnectorBase_V1", "SupportsHMA", "supports_hma"]
