# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors vllm/distributed/kv_transfer/kv_connector/v1/base.py
# @ 003df2961dd8830c317a61f9745ccd557da9fa06 (vllm-project/vllm): SupportsHMA,
# supports_hma, KVConnectorRole, KVConnector{Handshake,,Worker}Metadata, KVConnectorBase_V1
# with the same constructor, abstract methods, defaults and classmethods.
import enum
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.outputs import KVConnectorOutput

if TYPE_CHECKING:
    from vllm.config import VllmConfig

logger = logging.getLogger("vllm.distributed.kv_transfer.kv_connector.v1.base")

# (src kv caches, dst kv caches, src block ids, dst block ids, "h2d" | "d2h") -> None
CopyBlocksOp = Callable[[dict, dict, list, list, str], None]


class SupportsHMA(ABC):
    """Marks a connector usable with the hybrid memory allocator (several KV-cache groups)."""

    @abstractmethod
    def request_finished_all_groups(
        self, request: Any, block_ids: tuple[list[int], ...]
    ) -> tuple[bool, dict[str, Any] | None]:
        raise NotImplementedError


def supports_hma(connector: Any) -> bool:
    if isinstance(connector, type):
        return issubclass(connector, SupportsHMA)
    return isinstance(connector, SupportsHMA)


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorHandshakeMetadata(ABC):  # noqa: B024
    pass


class KVConnectorMetadata(ABC):  # noqa: B024
    """Scheduler connector -> worker connector, once per step (must be picklable)."""


class KVConnectorWorkerMetadata(ABC):
    """Worker connector -> scheduler connector; aggregated across workers."""

    @abstractmethod
    def aggregate(self, other: "KVConnectorWorkerMetadata") -> "KVConnectorWorkerMetadata":
        pass


class KVConnectorBase_V1(ABC):
    @property
    def prefer_cross_layer_blocks(self) -> bool:
        return False

    @property
    def supports_eagle_prefix_cache_hashing(self) -> bool:
        return False

    @property
    def requires_kv_delivery(self) -> bool:
        return self._kv_transfer_config.is_kv_producer

    def __init__(self, vllm_config: "VllmConfig", role: KVConnectorRole,
                 kv_cache_config: Any):
        logger.warning("Initializing KVConnectorBase_V1. This API is experimental and "
                       "subject to change in the future as we iterate the design.")
        self._connector_metadata: KVConnectorMetadata | None = None
        self._vllm_config = vllm_config
        if vllm_config.kv_transfer_config is not None:
            self._kv_transfer_config = vllm_config.kv_transfer_config
        else:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._kv_cache_config = kv_cache_config
        self._role = role
        self.use_eagle_prefix_cache_hashing = False

    def set_eagle_prefix_cache_hashing(self, enabled: bool) -> None:
        self.use_eagle_prefix_cache_hashing = enabled

    @property
    def role(self) -> KVConnectorRole:
        return self._role

    # ---------------- worker side ----------------
    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        self._connector_metadata = None

    def _get_connector_metadata(self) -> KVConnectorMetadata:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def has_connector_metadata(self) -> bool:
        return self._connector_metadata is not None

    def register_kv_caches(self, kv_caches: dict[str, Any]):
        return

    def register_cross_layers_kv_cache(self, kv_cache: Any, attn_backend: type):
        return

    def set_host_xfer_buffer_ops(self, copy_operation: CopyBlocksOp):
        return

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata):
        return

    @abstractmethod
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        pass

    @abstractmethod
    def wait_for_layer_load(self, layer_name: str) -> None:
        pass

    @abstractmethod
    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        pass

    @abstractmethod
    def wait_for_save(self):
        pass

    def get_finished(self, finished_req_ids: set[str]
                     ) -> tuple[set[str] | None, set[str] | None]:
        return None, None

    def get_block_ids_with_load_errors(self) -> set[int]:
        return set()

    def shutdown(self):
        return None

    def get_kv_connector_stats(self):
        return None

    def get_kv_connector_kv_cache_events(self):
        return None

    def get_handshake_metadata(self) -> KVConnectorHandshakeMetadata | None:
        return None

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        return None

    # ---------------- scheduler side ----------------
    def bind_gpu_block_pool(self, gpu_block_pool: Any) -> None:
        return

    @abstractmethod
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int
                                   ) -> tuple[int | None, bool]:
        pass

    @abstractmethod
    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int):
        pass

    @abstractmethod
    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        pass

    def on_new_request(self, request: Any) -> None:
        return

    def update_connector_output(self, connector_output: KVConnectorOutput):
        return

    def request_finished(self, request: Any, block_ids: list[int]
                         ) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    def take_events(self) -> Iterable[Any]:
        return ()

    def has_pending_push_work(self) -> bool:
        return False

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: "VllmConfig") -> str | None:
        if cls is KVConnectorBase_V1:
            raise TypeError("get_required_kvcache_layout should not be called "
                            "on the abstract base class")
        return None

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        return False

    def get_finished_count(self) -> int | None:
        return None

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None):
        return None

    def set_xfer_handshake_metadata(self, metadata: dict) -> None:
        return None

    def set_xfer_handshake_metadata_pp_aware(self, metadata: dict) -> None:
        if any(pp_rank != 0 for pp_rank, _ in metadata):
            raise ValueError(f"{type(self).__name__} received pp_rank > 0 handshake metadata "
                             "but does not support PP-disaggregated KV transfer.")
        self.set_xfer_handshake_metadata({tp: m for (_, tp), m in metadata.items()})

    @classmethod
    def build_prom_metrics(cls, vllm_config, metric_types, labelnames,
                           per_engine_labelvalues):
        return None

    def reset_cache(self) -> bool | None:
        return None
