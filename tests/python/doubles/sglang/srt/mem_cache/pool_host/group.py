# TEST DOUBLE (tierkv tests), not SGLang.
# Mirrors PoolEntry and HostPoolGroup of python/sglang/srt/mem_cache/pool_host/group.py of
# sgl-project/sglang @ 0142dde6f8f9ca74d5572c9572da056ab912152e (the subset a storage backend
# and HybridCacheController's storage path touch): entries / entry_map / anchor_entry (the
# primary-index anchor, else the first entry), layout / page_size / size from the anchor,
# alloc(n, pool=name) / free(indices, pool=name) per pool, kv_buffer = the anchor's. Own code.
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import torch


@dataclass
class PoolEntry:
    name: Any
    host_pool: Any
    device_pool: Any = None
    layer_mapper: Optional[Callable[[int], Optional[int]]] = None
    is_primary_index_anchor: bool = False


class HostPoolGroup:
    def __init__(self, entries: List[PoolEntry]):
        if not entries:
            raise ValueError("HostPoolGroup requires at least one pool entry.")
        if len({e.name for e in entries}) != len(entries):
            raise ValueError("HostPoolGroup pool names must be unique.")
        anchors = [e for e in entries if e.is_primary_index_anchor]
        if len(anchors) > 1:
            raise ValueError("HostPoolGroup requires at most one anchor pool.")
        self.entries = list(entries)
        self.entry_map = {e.name: e for e in entries}
        self.anchor_entry = anchors[0] if anchors else entries[0]
        self.layout = self.anchor_entry.host_pool.layout
        self.page_size = self.anchor_entry.host_pool.page_size
        self.device = self.anchor_entry.host_pool.device
        self.size = self.anchor_entry.host_pool.size

    def get_entry(self, name=None) -> PoolEntry:
        return self.anchor_entry if name is None else self.entry_map[name]

    def get_pool(self, name):
        return self.get_entry(name).host_pool

    def alloc(self, need_size: int, *, pool=None, reclaim=None) -> Optional[torch.Tensor]:
        host_pool = self.get_entry(pool).host_pool
        indices = host_pool.alloc(need_size)
        if indices is None and reclaim is not None:
            reclaim(need_size)
            indices = host_pool.alloc(need_size)
        return indices

    def free(self, indices: torch.Tensor, *, pool=None) -> int:
        return self.get_entry(pool).host_pool.free(indices)

    @property
    def kv_buffer(self):
        return self.anchor_entry.host_pool.kv_buffer

    @property
    def size_per_token(self):
        return self.anchor_entry.host_pool.size_per_token
