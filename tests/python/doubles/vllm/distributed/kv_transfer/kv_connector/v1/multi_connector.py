# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors vllm/distributed/kv_transfer/kv_connector/v1/multi_connector.py
# @ 00f4240ee6458263d76cf51ca7901ce1350bb4d1 (vllm-project/vllm), written from that source:
# - children come from kv_connector_extra_config["connectors"]: each dict becomes its own
#   KVTransferConfig(**child, engine_id=child's or the parent's) on a shallow copy of the
#   VllmConfig; the class comes from KVConnectorFactory.get_connector_class and is built as
#   cls(config, role, kv_cache_config) - always three arguments, no compat shim;
# - HMA enabled only if every child supports it (assert);
# - get_num_new_matched_tokens asks EVERY child in order (None from any child -> (None, False));
#   the first child with a hit (> 0) is chosen and remembered per request;
#   update_state_after_alloc: the chosen child gets (blocks, n), every other child
#   (blocks, 0) - at this commit the request's real blocks ("Other connectors still receive
#   the request's real blocks"); vLLM releases before it passed blocks.new_empty(), selectable
#   here with OTHERS_GET_EMPTY_BLOCKS = True;
# - build_connector_meta -> MultiKVConnectorMetadata(tuple of each child's, extra_async_saves);
#   bind/clear/handle_preemptions per child; worker hooks fan out to every child;
# - request_finished: all children; delay if any child delays; with k > 1 delaying children
#   the request is counted k - 1 "extra" times (sent to the workers in the metadata), and
#   get_finished names it in finished_sending only when the last child reports it;
# - take_events chains the children's; get_kv_connector_stats groups the children's stats by
#   class name in MultiKVConnectorStats; update_connector_output hands each child its own
#   worker metadata (MultiKVConnectorWorkerMetadata);
# - NOT forwarded at that commit (base defaults): get_kv_connector_kv_cache_events (a TODO
#   in the source, vLLM PR 31811) - a child's worker-side KV events never leave the worker.
# Differences: the real get_finished goes through get_transfer_results /
# KVConnectorTransferResults (not in this base double): the same merge and counting of
# finished_sending/finished_recving is done here from each child's get_finished. Prefix-replay
# checkpoints, mem-pool contexts, Prometheus metrics, finish_forward/reset_capture_state and
# register_finished_partial_tail are left out.
import copy
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vllm.config.kv_transfer import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
    SupportsHMA,
    supports_hma,
)
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

logger = logging.getLogger("vllm.distributed.kv_transfer.kv_connector.v1.multi_connector")


@dataclass
class MultiKVConnectorMetadata(KVConnectorMetadata):
    metadata: tuple
    extra_async_saves: dict[str, int] | None = None


@dataclass
class MultiKVConnectorWorkerMetadata(KVConnectorWorkerMetadata):
    metadata: tuple

    def aggregate(self, other):
        assert isinstance(other, MultiKVConnectorWorkerMetadata)
        assert len(self.metadata) == len(other.metadata)
        merged = []
        for mine, theirs in zip(self.metadata, other.metadata):
            if mine is None:
                merged.append(theirs)
            elif theirs is None:
                merged.append(mine)
            else:
                merged.append(mine.aggregate(theirs))
        return MultiKVConnectorWorkerMetadata(metadata=tuple(merged))


@dataclass
class MultiKVConnectorStats(KVConnectorStats):
    """data: {child connector class name: that child's KVConnectorStats}."""

    def aggregate(self, other):
        for name, stats in other.data.items():
            if name in self.data:
                assert isinstance(stats, type(self.data[name]))
                self.data[name] = self.data[name].aggregate(stats)
            else:
                self.data[name] = stats
        return self

    def reset(self):
        for stats in self.data.values():
            stats.reset()

    def reduce(self) -> dict[str, Any]:
        return {name: stats.reduce() for name, stats in self.data.items()}

    def is_empty(self) -> bool:
        return all(stats.is_empty() for stats in self.data.values())

    def __getitem__(self, name: str) -> KVConnectorStats:
        return self.data[name]

    def __setitem__(self, name: str, stats: KVConnectorStats) -> None:
        self.data[name] = stats


class MultiConnector(KVConnectorBase_V1, SupportsHMA):
    """Several connectors at once: load from the first child (config order) that reports a
    hit; save to all of them."""

    # vLLM before 00f4240 gave the non-chosen children blocks.new_empty() (see the header).
    OTHERS_GET_EMPTY_BLOCKS = False

    @classmethod
    def requires_piecewise_for_cudagraph(cls, extra_config: dict[str, Any]) -> bool:
        for child in extra_config.get("connectors", []):
            child_cls = KVConnectorFactory.get_connector_class(KVTransferConfig(**child))
            if child_cls.requires_piecewise_for_cudagraph(
                    child.get("kv_connector_extra_config", {})):
                return True
        return False

    @classmethod
    def all_children_support_hma(cls, kv_transfer_config: KVTransferConfig) -> bool:
        # Real: KVConnectorFactory.supports_hma_config(child config) per child.
        children = kv_transfer_config.kv_connector_extra_config.get("connectors", [])
        if not children:
            return False
        for child in children:
            ktc = KVTransferConfig(**{"engine_id": kv_transfer_config.engine_id, **child})
            if not supports_hma(KVConnectorFactory.get_connector_class(ktc)):
                return False
        return True

    def __init__(self, vllm_config, role: KVConnectorRole, kv_cache_config):
        super().__init__(vllm_config=vllm_config, role=role, kv_cache_config=kv_cache_config)
        self._connectors: list[KVConnectorBase_V1] = []
        self._ktc_kv_transfer_config = []
        for child_cls, child_config in self._get_connector_classes_and_configs(vllm_config):
            self._connectors.append(child_cls(child_config, role, kv_cache_config))
            self._ktc_kv_transfer_config.append(child_config.kv_transfer_config)
        self._all_support_hma = MultiConnector.all_children_support_hma(
            vllm_config.kv_transfer_config)
        assert (vllm_config.scheduler_config.disable_hybrid_kv_cache_manager
                or self._all_support_hma), \
            "HMA should not be enabled unless all sub-connectors support it"
        # request id -> index of the child chosen to load it
        self._requests_to_connector: dict[str, int] = {}
        # request id -> async saves still to come beyond the first (scheduler: set in
        # request_finished, shipped in the next metadata; worker: counted down in get_finished)
        self._extra_async_saves: dict[str, int] = {}

    @property
    def sub_connectors(self) -> list[KVConnectorBase_V1]:
        return list(self._connectors)

    @property
    def requires_kv_delivery(self) -> bool:
        return any(c.requires_kv_delivery for c in self._connectors)

    @classmethod
    def _get_connector_classes_and_configs(cls, vllm_config) -> list[tuple[type, Any]]:
        assert vllm_config.kv_transfer_config is not None
        children = vllm_config.kv_transfer_config.kv_connector_extra_config.get("connectors")
        assert children is not None
        out = []
        for child in children:
            child_config = copy.copy(vllm_config)
            engine_id = child.get("engine_id", vllm_config.kv_transfer_config.engine_id)
            # Like the real one: a child dict that itself names engine_id fails here.
            child_config.kv_transfer_config = KVTransferConfig(**child, engine_id=engine_id)
            out.append((KVConnectorFactory.get_connector_class(child_config.kv_transfer_config),
                        child_config))
        return out

    # ---------------- both sides ----------------
    def register_kv_caches(self, kv_caches: dict[str, Any]):
        for c in self._connectors:
            c.register_kv_caches(kv_caches)

    def bind_gpu_block_pool(self, gpu_block_pool: Any) -> None:
        for c in self._connectors:
            c.bind_gpu_block_pool(gpu_block_pool)

    def bind_connector_metadata(self, connector_metadata: KVConnectorMetadata) -> None:
        assert isinstance(connector_metadata, MultiKVConnectorMetadata)
        if connector_metadata.extra_async_saves:
            self._extra_async_saves.update(connector_metadata.extra_async_saves)
        for c, child_meta in zip(self._connectors, connector_metadata.metadata):
            c.bind_connector_metadata(child_meta)
        super().bind_connector_metadata(connector_metadata)

    def clear_connector_metadata(self) -> None:
        for c in self._connectors:
            c.clear_connector_metadata()
        super().clear_connector_metadata()

    def shutdown(self):
        error = None
        for c in self._connectors:
            try:
                c.shutdown()
            except Exception as e:  # every child is shut down; the last error is raised
                logger.exception("Exception during connector %s shutdown.",
                                 type(c).__name__)
                error = e
        if error:
            raise error

    # ---------------- worker side ----------------
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        for c in self._connectors:
            c.start_load_kv(forward_context, **kwargs)

    def wait_for_layer_load(self, layer_name: str) -> None:
        for c in self._connectors:
            c.wait_for_layer_load(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any,
                      **kwargs: Any) -> None:
        for c in self._connectors:
            c.save_kv_layer(layer_name, kv_layer, attn_metadata, **kwargs)

    def wait_for_save(self):
        for c in self._connectors:
            c.wait_for_save()

    def get_finished(self, finished_req_ids: set[str]
                     ) -> tuple[set[str] | None, set[str] | None]:
        sending_all: set[str] = set()
        recving_all: set[str] = set()
        for c in self._connectors:
            sending, recving = c.get_finished(finished_req_ids)
            recving_all.update(recving or ())
            for req_id in sending or ():
                pending = self._extra_async_saves.get(req_id)
                if pending is None:
                    sending_all.add(req_id)  # the last child still saving it
                    continue
                assert pending > 0
                if pending == 1:
                    del self._extra_async_saves[req_id]
                else:
                    self._extra_async_saves[req_id] = pending - 1
        return sending_all or None, recving_all or None

    def get_block_ids_with_load_errors(self) -> set[int]:
        out: set[int] = set()
        for c in self._connectors:
            out |= c.get_block_ids_with_load_errors()
        return out

    def set_host_xfer_buffer_ops(self, copy_operation):
        for c in self._connectors:
            c.set_host_xfer_buffer_ops(copy_operation)

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata):
        assert isinstance(kv_connector_metadata, MultiKVConnectorMetadata)
        for c, child_meta in zip(self._connectors, kv_connector_metadata.metadata):
            c.handle_preemptions(child_meta)

    def get_finished_count(self) -> int | None:
        counts = [c.get_finished_count() for c in self._connectors]
        if any(n is None for n in counts):
            return None
        distinct = set(counts)
        if len(distinct) > 1:
            raise ValueError("MultiConnector children returned incompatible finished counts: "
                             f"{sorted(distinct)}")
        return next(iter(distinct), None)

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        metas = None
        for i, c in enumerate(self._connectors):
            m = c.build_connector_worker_meta()
            if metas is None and m is not None:
                metas = [None] * i
            if metas is not None:
                metas.append(m)
        return None if metas is None else MultiKVConnectorWorkerMetadata(metadata=tuple(metas))

    # ---------------- scheduler side ----------------
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int
                                   ) -> tuple[int | None, bool]:
        result = (0, False)
        for i, c in enumerate(self._connectors):
            toks, load_async = c.get_num_new_matched_tokens(request, num_computed_tokens)
            if toks is None:  # a child still looking up: ask again later
                return None, False
            if result[0] == 0 and toks > 0:
                self._requests_to_connector[request.request_id] = i
                result = (toks, load_async)
        return result

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int):
        chosen = self._requests_to_connector.get(request.request_id, -1)
        others = blocks.new_empty() if self.OTHERS_GET_EMPTY_BLOCKS else blocks
        for i, c in enumerate(self._connectors):
            if i == chosen:
                c.update_state_after_alloc(request, blocks, num_external_tokens)
            else:
                c.update_state_after_alloc(request, others, 0)

    def on_new_request(self, request: Any) -> None:
        for c in self._connectors:
            c.on_new_request(request)

    def build_connector_meta(self, scheduler_output) -> MultiKVConnectorMetadata:
        meta = MultiKVConnectorMetadata(
            metadata=tuple(c.build_connector_meta(scheduler_output) for c in self._connectors))
        if self._extra_async_saves:
            meta.extra_async_saves = self._extra_async_saves
            self._extra_async_saves = {}
        return meta

    def update_connector_output(self, connector_output):
        multi_meta = connector_output.kv_connector_worker_meta
        if multi_meta is not None:
            assert isinstance(multi_meta, MultiKVConnectorWorkerMetadata)
        try:
            for i, c in enumerate(self._connectors):
                if multi_meta is not None:
                    connector_output.kv_connector_worker_meta = multi_meta.metadata[i]
                c.update_connector_output(connector_output)
        finally:
            connector_output.kv_connector_worker_meta = multi_meta

    def get_handshake_metadata(self):
        for c in self._connectors:
            m = c.get_handshake_metadata()
            if m is not None:
                return m
        return None

    def set_xfer_handshake_metadata(self, metadata: dict) -> None:
        for c in self._connectors:
            c.set_xfer_handshake_metadata(metadata)

    def set_xfer_handshake_metadata_pp_aware(self, metadata: dict) -> None:
        for c in self._connectors:
            c.set_xfer_handshake_metadata_pp_aware(metadata)

    def _aggregate_request_finished(self, request: Any, finish) -> tuple[bool, dict | None]:
        async_saves = 0
        params = None
        for c in self._connectors:
            delay, child_params = finish(c)
            if delay:
                async_saves += 1
            if child_params is not None:
                if params is None:
                    params = child_params
                else:
                    clash = set(params) & set(child_params)
                    if clash:
                        raise RuntimeError("Key clash in kv_transfer_params from multiple "
                                           f"connectors: {clash}")
                    params.update(child_params)
        if async_saves > 1:
            self._extra_async_saves[request.request_id] = async_saves - 1
        self._requests_to_connector.pop(request.request_id, None)
        return async_saves > 0, params

    def request_finished(self, request: Any, blocks: list[int]) -> tuple[bool, dict | None]:
        return self._aggregate_request_finished(
            request, lambda c: c.request_finished(request, blocks))

    def request_finished_all_groups(self, request: Any, block_ids: tuple[list[int], ...]
                                    ) -> tuple[bool, dict | None]:
        if not self._all_support_hma:
            assert len(block_ids) == 1, \
                "HMA with multiple kv_cache_groups requires all sub-connectors to support HMA"
            return self.request_finished(request, block_ids[0])
        return self._aggregate_request_finished(
            request, lambda c: c.request_finished_all_groups(request, block_ids))

    def take_events(self) -> Iterable[Any]:
        for c in self._connectors:
            yield from c.take_events()

    def has_pending_push_work(self) -> bool:
        return any(c.has_pending_push_work() for c in self._connectors)

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config) -> str | None:
        layouts = set()
        for child_cls, child_config in cls._get_connector_classes_and_configs(vllm_config):
            layout = child_cls.get_required_kvcache_layout(child_config)
            if layout is not None:
                layouts.add(layout)
        if len(layouts) > 1:
            raise ValueError(f"KV cache layout mismatch: found {len(layouts)} different "
                             f"layouts ({', '.join(layouts)}).All connectors must use the same "
                             "layout.")
        return next(iter(layouts), None)

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None):
        if data is None:
            return MultiKVConnectorStats()
        rebuilt = {}
        for name, value in data.items():
            if isinstance(value, KVConnectorStats):
                rebuilt[name] = value
                continue
            # Serialized (another process): only a REGISTERED connector name resolves here.
            child_cls = KVConnectorFactory.get_connector_class_by_name(name)
            stats = child_cls.build_kv_connector_stats(data=value)
            if stats:
                rebuilt[name] = stats
        return MultiKVConnectorStats(data=rebuilt)

    def get_kv_connector_stats(self):
        grouped = None
        for c in self._connectors:
            stats = c.get_kv_connector_stats()
            if stats is None:
                continue
            if grouped is None:
                grouped = MultiKVConnectorStats()
            name = type(c).__name__
            grouped[name] = grouped[name].aggregate(stats) if name in grouped.data else stats
        return grouped

    def reset_cache(self) -> bool:
        return all([c.reset_cache() is not False for c in self._connectors])
