# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors KVConnectorStats from vllm/distributed/kv_transfer/kv_connector/v1/metrics.py
# (vllm-project/vllm main): a dataclass over `data: dict`; subclasses implement
# reset/aggregate/reduce/is_empty (base raises NotImplementedError).
from dataclasses import dataclass, field
from typing import Any


@dataclass
class KVConnectorStats:
    data: dict[str, Any] = field(default_factory=dict)

    def reset(self):
        raise NotImplementedError

    def aggregate(self, other: "KVConnectorStats") -> "KVConnectorStats":
        raise NotImplementedError

    def reduce(self) -> dict[str, int | float]:
        raise NotImplementedError

    def is_empty(self) -> bool:
        raise NotImplementedError
