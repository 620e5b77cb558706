# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors vllm/v1/request.py @ dba83d52c06471eabafba4310718ac7a100cbfa4 (vllm-project/vllm):
# constructor parameter names, the fields a connector reads, block_hashes kept current by
# the block_hasher (vllm.v1.core.kv_cache_utils.get_request_block_hasher), RequestStatus.
# sampling_params/pooling_params may both be None here (real vLLM raises).
import enum
import time
from collections.abc import Callable, Mapping
from typing import Any


class RequestStatus(enum.IntEnum):
    WAITING = enum.auto()
    WAITING_FOR_FSM = enum.auto()
    WAITING_FOR_REMOTE_KVS = enum.auto()
    WAITING_FOR_STREAMING_REQ = enum.auto()
    RUNNING = enum.auto()
    PREEMPTED = enum.auto()
    # anything after PREEMPTED is finished
    FINISHED_STOPPED = enum.auto()
    FINISHED_LENGTH_CAPPED = enum.auto()
    FINISHED_ABORTED = enum.auto()
    FINISHED_IGNORED = enum.auto()
    FINISHED_ERROR = enum.auto()

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def is_finished(status: "RequestStatus") -> bool:
        return status > RequestStatus.PREEMPTED


class Request:
    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int] | None,
        sampling_params: Any | None = None,
        pooling_params: Any | None = None,
        eos_token_id: int | None = None,
        client_index: int = 0,
        arrival_time: float | None = None,
        prompt_embeds: Any | None = None,
        mm_features: list | None = None,
        lora_request: Any | None = None,
        cache_salt: str | None = None,
        priority: int = 0,
        trace_headers: Mapping[str, str] | None = None,
        block_hasher: Callable[["Request"], list[bytes]] | None = None,
        resumable: bool = False,
        reasoning_ended: bool | None = None,
    ) -> None:
        self.request_id = request_id
        self.client_index = client_index
        self.priority = priority
        self.sampling_params = sampling_params
        self.pooling_params = pooling_params
        self.eos_token_id = eos_token_id
        self.lora_request = lora_request
        self.arrival_time = arrival_time if arrival_time is not None else time.time()
        self.status = RequestStatus.WAITING
        self.stop_reason = None
        # P/D: sampling_params.extra_args["kv_transfer_params"] in real vLLM
        extra = getattr(sampling_params, "extra_args", None)
        self.kv_transfer_params: dict[str, Any] | None = (
            extra.get("kv_transfer_params") if extra else None)
        self.max_tokens = getattr(sampling_params, "max_tokens", None) or 16
        self.prompt_token_ids = prompt_token_ids
        self.prompt_embeds = prompt_embeds
        self.num_prompt_tokens = len(prompt_token_ids or [])
        self._output_token_ids: list[int] = []
        self._all_token_ids: list[int] = list(prompt_token_ids or [])
        self.num_output_placeholders = 0
        self.spec_token_ids: list[int] = []
        self.num_computed_tokens = 0
        self.cache_salt = cache_salt
        self.mm_features = mm_features or []
        # real: ConstantList read-only views over the same lists
        self.output_token_ids = self._output_token_ids
        self.all_token_ids = self._all_token_ids
        self.trace_headers = trace_headers
        self.num_cached_tokens = -1
        self.is_prefill_chunk = False
        self.num_nans_in_logits = 0
        self.num_preemptions = 0
        self.num_external_computed_tokens = 0
        self.block_hashes: list[bytes] = []
        self._block_hasher = block_hasher
        self.update_block_hashes()
        self.skip_reading_prefix_cache = False
        self.resumable = resumable

    def append_output_token_ids(self, token_ids: int | list[int]) -> None:
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        self._output_token_ids.extend(token_ids)
        self._all_token_ids.extend(token_ids)
        self.update_block_hashes()

    def update_block_hashes(self) -> None:
        if self._block_hasher is not None:
            self.block_hashes.extend(self._block_hasher(self))

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)

    @property
    def num_tokens_with_spec(self) -> int:
        return len(self._all_token_ids) + len(self.spec_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self._output_token_ids)

    def is_finished(self) -> bool:
        return RequestStatus.is_finished(self.status)
