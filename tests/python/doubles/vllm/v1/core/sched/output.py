# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors vllm/v1/core/sched/output.py @ 00e8f1fd0936d138370d01dbe1b4f8e12baf63b1
# (vllm-project/vllm): NewRequestData, CachedRequestData (resumed_req_ids: set, not the older
# resumed_from_preemption: list[bool]), SchedulerOutput. Field names/order as in the real file.
from dataclasses import dataclass, field
from typing import Any


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list[int] | None
    mm_features: list
    sampling_params: Any | None
    pooling_params: Any | None
    block_ids: tuple[list[int], ...]  # one list per KV-cache group
    num_computed_tokens: int
    lora_request: Any | None
    prompt_embeds: Any | None = None
    prefill_token_ids: list[int] | None = None

    @classmethod
    def from_request(cls, request, block_ids: tuple[list[int], ...],
                     prefill_token_ids: list[int] | None = None) -> "NewRequestData":
        return cls(req_id=request.request_id, prompt_token_ids=request.prompt_token_ids,
                   mm_features=request.mm_features, sampling_params=request.sampling_params,
                   pooling_params=request.pooling_params, block_ids=block_ids,
                   num_computed_tokens=request.num_computed_tokens,
                   lora_request=request.lora_request, prompt_embeds=request.prompt_embeds,
                   prefill_token_ids=prefill_token_ids)


@dataclass
class CachedRequestData:
    req_ids: list[str]
    # ids in this set: new_block_ids REPLACE the request's block ids (resumed after
    # preemption); others: new_block_ids are APPENDED.
    resumed_req_ids: set[str]
    new_token_ids: list[list[int]]  # only filled with pipeline parallelism
    all_token_ids: dict[str, list[int]]  # for requests not scheduled in the prior step
    new_block_ids: list[tuple[list[int], ...] | None]
    num_computed_tokens: list[int]
    num_output_tokens: list[int]

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)

    def is_context_phase(self, req_id: str) -> bool:
        n = dict(zip(self.req_ids, self.num_output_tokens)).get(req_id)
        return n is not None and n == 0

    @classmethod
    def make_empty(cls) -> "CachedRequestData":
        return cls(req_ids=[], resumed_req_ids=set(), new_token_ids=[], all_token_ids={},
                   new_block_ids=[], num_computed_tokens=[], num_output_tokens=[])


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]]
    scheduled_encoder_inputs: dict[str, list[int]]
    num_common_prefix_blocks: list[int]
    finished_req_ids: set[str]
    free_encoder_mm_hashes: list[str]
    preempted_req_ids: set[str] | None = None
    pending_structured_output_tokens: bool = False
    kv_connector_metadata: Any | None = None
    ec_connector_metadata: Any | None = None

    @classmethod
    def make_empty(cls) -> "SchedulerOutput":
        return cls(scheduled_new_reqs=[], scheduled_cached_reqs=CachedRequestData.make_empty(),
                   num_scheduled_tokens={}, total_num_scheduled_tokens=0,
                   scheduled_spec_decode_tokens={}, scheduled_encoder_inputs={},
                   num_common_prefix_blocks=[], finished_req_ids=set(),
                   free_encoder_mm_hashes=[])
