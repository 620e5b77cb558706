"""The tiny engine through tierkv's vLLM integration (``tierkv.integrations.vllm``).

vLLM's KV-connector factory loads a connector class by name from
``kv_connector_module_path`` and constructs it as ``cls(vllm_config, role, kv_cache_config)``;
the scheduler then hands it ``SchedulerOutput`` objects. This module builds the same: the
config objects (the fields the connector reads), the per-step ``SchedulerOutput`` with new,
cached (resumed after preemption or recomputing after a load error) and preempted requests,
and the requests' ``block_hashes`` (the engine's chunk hashes, one per full block).
"""

import importlib
from dataclasses import dataclass, field
from types import SimpleNamespace


class FullAttentionSpec(SimpleNamespace):
    """vLLM's spec of a full-attention KV-cache group (the fields the connector reads)."""


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list
    block_ids: tuple
    num_computed_tokens: int


@dataclass
class CachedRequestData:
    req_ids: list = field(default_factory=list)
    resumed_req_ids: set = field(default_factory=set)
    new_token_ids: list = field(default_factory=list)
    new_block_ids: list = field(default_factory=list)
    num_computed_tokens: list = field(default_factory=list)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list = field(default_factory=list)
    scheduled_cached_reqs: CachedRequestData = field(default_factory=CachedRequestData)
    num_scheduled_tokens: dict = field(default_factory=dict)
    total_num_scheduled_tokens: int = 0
    preempted_req_ids: set = field(default_factory=set)
    finished_req_ids: set = field(default_factory=set)


def is_vllm_config(kv_transfer_config):
    return isinstance(kv_transfer_config, dict) and "kv_connector_module_path" in kv_transfer_config


def make_connectors(kv_transfer_config, model_cfg, num_blocks, block_size, layer_names):
    """(scheduler, worker) connectors loaded the way vLLM's factory loads them."""
    ktc = SimpleNamespace(
        kv_connector=kv_transfer_config.get("kv_connector", "TierkvConnector"),
        kv_connector_module_path=kv_transfer_config["kv_connector_module_path"],
        kv_role=kv_transfer_config.get("kv_role", "kv_both"),
        kv_connector_extra_config=dict(kv_transfer_config.get("kv_connector_extra_config", {})))
    vllm_config = SimpleNamespace(
        kv_transfer_config=ktc,
        model_config=SimpleNamespace(model=model_cfg.name, dtype=model_cfg.dtype, use_mla=False),
        cache_config=SimpleNamespace(block_size=block_size, cache_dtype="auto"),
        parallel_config=SimpleNamespace(tensor_parallel_size=1, pipeline_parallel_size=1,
                                        rank=0))
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=model_cfg.n_kv_heads,
                             head_size=model_cfg.head_dim, dtype=model_cfg.dtype)
    kv_cache_config = SimpleNamespace(
        num_blocks=num_blocks,
        kv_cache_groups=[SimpleNamespace(layer_names=list(layer_names), kv_cache_spec=spec)])
    module = importlib.import_module(ktc.kv_connector_module_path)
    cls = getattr(module, ktc.kv_connector)
    scheduler = cls(vllm_config, module.KVConnectorRole.SCHEDULER, kv_cache_config)
    worker = cls(vllm_config, module.KVConnectorRole.WORKER, kv_cache_config)
    return scheduler, worker


class StepBuilder:
    """Turns the tiny engine's scheduled (request, block_ids, tokens after the step) into
    vLLM's SchedulerOutput: a request's first step (or its first after being preempted) is
    new; later ones are cached."""

    def __init__(self):
        self.seen = set()

    def build(self, scheduled, preempted=()):
        out = SchedulerOutput(preempted_req_ids=set(preempted))
        for rid in preempted:
            self.seen.discard(rid)
        for r, block_ids, after in scheduled:
            nc = r.num_computed_tokens
            out.num_scheduled_tokens[r.request_id] = after - nc
            out.total_num_scheduled_tokens += after - nc
            if r.request_id not in self.seen:
                self.seen.add(r.request_id)
                out.scheduled_new_reqs.append(NewRequestData(
                    r.request_id, list(r.prompt_token_ids), (list(block_ids),), nc))
            else:
                c = out.scheduled_cached_reqs
                c.req_ids.append(r.request_id)
                c.new_token_ids.append([])
                c.new_block_ids.append(None)  # the tiny engine allocates every block upfront
                c.num_computed_tokens.append(nc)
        return out

    def finished(self, rid):
        self.seen.discard(rid)
