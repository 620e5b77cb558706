# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors vllm/config/kv_transfer.py KVTransferConfig (vllm-project/vllm; fields checked at
# 007c643b4abb7a79e69ef2b343b3dc80eb643c0d plus the newer enable_permute_local_kv and
# kv_load_failure_policy seen in current main). Real one is a pydantic dataclass.
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

KVProducer = Literal["kv_producer", "kv_both"]
KVConsumer = Literal["kv_consumer", "kv_both"]
KVRole = Literal[KVProducer, KVConsumer]
_ROLES = ("kv_producer", "kv_consumer", "kv_both")
_PRODUCERS = ("kv_producer", "kv_both")
_CONSUMERS = ("kv_consumer", "kv_both")


@dataclass
class KVTransferConfig:
    kv_connector: str | None = None
    engine_id: str | None = None
    kv_buffer_device: str | None = "cuda"
    kv_buffer_size: float = 1e9
    kv_role: str | None = None
    kv_rank: int | None = None
    kv_parallel_size: int = 1
    kv_ip: str = "127.0.0.1"
    kv_port: int = 14579
    kv_connector_extra_config: dict[str, Any] = field(default_factory=dict)
    kv_connector_module_path: str | None = None
    enable_permute_local_kv: bool = False
    kv_load_failure_policy: Literal["recompute", "fail"] = "fail"

    def __post_init__(self) -> None:
        if self.engine_id is None:
            self.engine_id = str(uuid.uuid4())
        if self.kv_role is not None and self.kv_role not in _ROLES:
            raise ValueError(f"Unsupported kv_role: {self.kv_role}. Supported roles are {_ROLES}")
        if self.kv_connector is not None and self.kv_role is None:
            raise ValueError("Please specify kv_role when kv_connector is set, supported "
                             f"roles are {_ROLES}")
        if self.kv_load_failure_policy not in ("recompute", "fail"):
            raise ValueError(f"Unsupported kv_load_failure_policy {self.kv_load_failure_policy}")

    @property
    def is_kv_transfer_instance(self) -> bool:
        return self.kv_connector is not None and self.kv_role in _ROLES

    @property
    def is_kv_producer(self) -> bool:
        return self.kv_connector is not None and self.kv_role in _PRODUCERS

    @property
    def is_kv_consumer(self) -> bool:
        return self.kv_connector is not None and self.kv_role in _CONSUMERS

    def get_from_extra_config(self, key, default) -> Any:
        return self.kv_connector_extra_config.get(key, default)


