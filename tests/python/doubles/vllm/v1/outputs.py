# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors KVConnectorOutput (and a minimal ModelRunnerOutput) from vllm/v1/outputs.py
# @ 0087e005dec9ed37e5564c4d13b38d350ce61992 (vllm-project/vllm).
from dataclasses import dataclass, field
from typing import Any


@dataclass
class KVConnectorOutput:
    finished_sending: set[str] | None = None
    finished_recving: set[str] | None = None
    kv_connector_stats: Any | None = None  # KVConnectorStats
    kv_cache_events: Any | None = None  # KVConnectorKVEvents
    kv_connector_worker_meta: Any | None = None  # KVConnectorWorkerMetadata
    invalid_block_ids: set[int] = field(default_factory=set)
    expected_finished_count: int = 0

    def is_empty(self):
        return (not self.finished_sending and not self.finished_recving
                and not self.kv_connector_stats and not self.kv_cache_events
                and not self.invalid_block_ids and not self.kv_connector_worker_meta)


@dataclass
class ModelRunnerOutput:
    req_ids: list[str]
    req_id_to_index: dict[str, int]
    sampled_token_ids: list[list[int]] = field(default_factory=list)
    kv_connector_output: KVConnectorOutput | None = None
