# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors vllm/distributed/kv_events.py @ 0181ea3173e53eea8cf04a86891488e3dc89bb34
# (vllm-project/vllm). Real events are msgspec.Struct(tag=True, omit_defaults=True); here
# dataclasses with the same field names, order, required/optional split and __hash__.
# NOTE: at this commit BlockStored.lora_name has NO default (required), like lora_id/medium.
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass
from typing import Any

ExternalBlockHash = bytes | int
MEDIUM_GPU = "GPU"


class KVCacheEvent:
    """Base class for all KV cache-related events."""


@dataclass(eq=True)
class BlockStored(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    parent_block_hash: ExternalBlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None  # deprecated, kept for compatibility
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None

    def __hash__(self) -> int:
        return hash((tuple(self.block_hashes), self.parent_block_hash, tuple(self.token_ids),
                     self.block_size, self.lora_id, self.medium,
                     tuple(self.extra_keys) if self.extra_keys else None, self.group_idx,
                     self.kv_cache_spec_kind, self.kv_cache_spec_sliding_window))


@dataclass(eq=True)
class BlockRemoved(KVCacheEvent):
    block_hashes: list[ExternalBlockHash]
    medium: str | None
    group_idx: int | None = None

    def __hash__(self) -> int:
        return hash((tuple(self.block_hashes), self.medium, self.group_idx))


@dataclass(eq=True)
class AllBlocksCleared(KVCacheEvent):
    def __hash__(self) -> int:
        return hash("AllBlocksCleared")


@dataclass
class KVEventBatch:
    ts: float
    events: list
    data_parallel_rank: int | None = None


class KVEventAggregator:
    """Counts events across workers; common events = those every worker emitted."""

    def __init__(self, num_workers: int) -> None:
        if num_workers <= 0:
            raise ValueError("num_workers must be greater than zero.")
        self._event_counter: Counter = Counter()
        self._num_workers = num_workers

    def add_events(self, events: list) -> None:
        if not isinstance(events, list):
            raise TypeError("events must be a list of KVCacheEvent.")
        self._event_counter.update(events)

    def get_common_events(self) -> list:
        return [e for e, c in self._event_counter.items() if c == self._num_workers]

    def get_all_events(self) -> list:
        return list(self._event_counter.elements())

    def clear_events(self) -> None:
        self._event_counter.clear()

    def increment_workers(self, count: int = 1) -> None:
        if count <= 0:
            raise ValueError("count must be positive.")
        self._num_workers += count

    def reset_workers(self) -> None:
        self._num_workers = 1

    def get_number_of_workers(self) -> int:
        return self._num_workers


class KVConnectorKVEvents(ABC):
    """Container the worker returns in KVConnectorOutput.kv_cache_events."""

    @abstractmethod
    def add_events(self, events: list) -> None: ...

    @abstractmethod
    def aggregate(self) -> "KVConnectorKVEvents": ...

    @abstractmethod
    def increment_workers(self, count: int = 1) -> None: ...

    @abstractmethod
    def get_all_events(self) -> list: ...

    @abstractmethod
    def get_number_of_workers(self) -> int: ...

    @abstractmethod
    def clear_events(self) -> None: ...

    def merge(self, other: "KVConnectorKVEvents") -> "KVConnectorKVEvents":
        self.add_events(other.get_all_events())
        return self
