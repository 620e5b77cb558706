"""A point-to-point KV connector double (NIXL/MooncakeConnector-shaped, not a real one) for
tests that put tierkv's connector beside a P2P connector in vLLM's MultiConnector (XpYd).

Loaded by configuration: ``{"kv_connector": "P2PConnector", "kv_connector_module_path":
"p2p_connector", "kv_role": ...}``. The "network" is this process: a producer's worker
registers its KV tensors under its engine_id; a consumer's worker copies blocks out of them.

- Producer (kv_producer / kv_both) scheduler: ``request_finished`` of a request whose
  ``kv_transfer_params`` has ``do_remote_decode`` keeps its blocks (delay) and returns
  ``do_remote_prefill`` params naming the engine, request and block ids; its worker reports
  the request in ``finished_sending`` once a consumer has read the blocks.
- Consumer (kv_consumer / kv_both) scheduler: a request with ``do_remote_prefill`` params is
  a hit of the remote's full blocks before the last prompt token, loaded asynchronously; the
  worker copies them in ``start_load_kv`` (``block_dim`` of the registered tensors, default 0)
  and reports the request in ``finished_recving``.
- Every call is recorded in ``calls`` (name, request id, num_external_tokens, block ids).
"""

import threading
from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

# engine_id -> {"caches": {layer: tensor}, "read": set of remote request ids read}
_ENGINES = {}
_LOCK = threading.Lock()


@dataclass
class P2PMetadata(KVConnectorMetadata):
    loads: list = field(default_factory=list)    # (req_id, local ids, engine, remote rid, ids)
    to_send: list = field(default_factory=list)  # request ids kept for a consumer to read


@dataclass
class P2PStats(KVConnectorStats):
    def __post_init__(self):
        if not self.data:
            self.reset()

    def reset(self):
        self.data = {"transfers": 0, "blocks": 0}

    def aggregate(self, other):
        for k, v in other.data.items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self):
        return dict(self.data)

    def is_empty(self):
        return not any(self.data.values())


def _ids(blocks):
    if hasattr(blocks, "get_block_ids"):
        blocks = blocks.get_block_ids()
    if blocks and isinstance(blocks[0], (list, tuple)):
        return list(blocks[0])
    return list(blocks or [])


class P2PConnector(KVConnectorBase_V1):
    def __init__(self, vllm_config, role, kv_cache_config=None):
        super().__init__(vllm_config, role, kv_cache_config)
        ktc = vllm_config.kv_transfer_config
        self.engine_id = ktc.engine_id
        self.kv_role = ktc.kv_role
        extra = ktc.kv_connector_extra_config or {}
        self.block_size = vllm_config.cache_config.block_size
        self.block_dim = int(extra.get("block_dim", 0))
        self.calls = []
        self._loads, self._to_send = [], []
        self._sending, self._recving = set(), set()
        self._stats = P2PStats()
        self._caches = None
        self._computed = {}  # request id -> num_computed_tokens of the last lookup

    # ---- scheduler side ----
    def get_num_new_matched_tokens(self, request, num_computed_tokens):
        rid = request.request_id
        self._computed[rid] = num_computed_tokens
        params = getattr(request, "kv_transfer_params", None) or {}
        n = 0
        if params.get("do_remote_prefill") and self.kv_role != "kv_producer":
            full = (len(request.prompt_token_ids) - 1) // self.block_size * self.block_size
            n = max(0, min(params["remote_num_tokens"], full) - num_computed_tokens)
        self.calls.append(("get_num_new_matched_tokens", rid, n, None))
        return n, bool(n)

    def update_state_after_alloc(self, request, blocks, num_external_tokens):
        rid = request.request_id
        ids = _ids(blocks)
        self.calls.append(("update_state_after_alloc", rid, num_external_tokens, ids))
        params = getattr(request, "kv_transfer_params", None) or {}
        if num_external_tokens > 0 and params.get("do_remote_prefill"):
            first = self._computed.get(rid, 0) // self.block_size
            last = first + num_external_tokens // self.block_size
            self._loads.append((rid, ids[first:last], params["remote_engine_id"],
                                params["remote_request_id"],
                                params["remote_block_ids"][first:last]))
            params["do_remote_prefill"] = False  # as NIXL: load once

    def build_connector_meta(self, scheduler_output):
        meta = P2PMetadata(loads=self._loads, to_send=self._to_send)
        self._loads, self._to_send = [], []
        return meta

    def request_finished(self, request, block_ids):
        params = getattr(request, "kv_transfer_params", None) or {}
        self.calls.append(("request_finished", request.request_id, None, list(block_ids)))
        self._computed.pop(request.request_id, None)
        if self.kv_role == "kv_consumer" or not params.get("do_remote_decode"):
            return False, None
        self._to_send.append(request.request_id)
        n = (len(request.prompt_token_ids) - 1) // self.block_size * self.block_size
        return True, {"do_remote_prefill": True, "do_remote_decode": False,
                      "remote_engine_id": self.engine_id,
                      "remote_request_id": request.request_id,
                      "remote_block_ids": list(block_ids), "remote_num_tokens": n}

    # ---- worker side ----
    def register_kv_caches(self, kv_caches):
        self._caches = kv_caches
        with _LOCK:
            _ENGINES[self.engine_id] = {"caches": kv_caches, "read": set()}

    def start_load_kv(self, forward_context, **kwargs):
        meta = self._get_connector_metadata()
        for rid, local, engine, remote_rid, remote in meta.loads:
            with _LOCK:
                src = _ENGINES[engine]
            for name, dst in self._caches.items():
                s = src["caches"][name]
                for d, r in zip(local, remote):
                    dst.select(self.block_dim, d).copy_(s.select(self.block_dim, r))
            with _LOCK:
                src["read"].add(remote_rid)
            self._recving.add(rid)
            self._stats.data["transfers"] += 1
            self._stats.data["blocks"] += len(local)
        self._sending.update(meta.to_send)

    def wait_for_layer_load(self, layer_name):
        return

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs):
        return

    def wait_for_save(self):
        return

    def get_finished(self, finished_req_ids):
        self.calls.append(("get_finished", tuple(sorted(finished_req_ids or ())), None, None))
        with _LOCK:
            read = _ENGINES.get(self.engine_id, {}).get("read", set())
            done = {r for r in self._sending if r in read}
            read -= done
        self._sending -= done
        recving, self._recving = self._recving, set()
        return done or None, recving or None

    def get_kv_connector_stats(self):
        if self._stats.is_empty():
            return None
        out, self._stats = self._stats, P2PStats()
        return out

    @classmethod
    def build_kv_connector_stats(cls, data=None):
        return P2PStats(data=dict(data)) if data is not None else P2PStats()

    def shutdown(self):
        with _LOCK:
            e = _ENGINES.get(self.engine_id)
            if e is not None and e["caches"] is self._caches:
                del _ENGINES[self.engine_id]
