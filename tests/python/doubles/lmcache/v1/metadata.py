# Test double of lmcache/v1/metadata.py (LMCache/LMCache @ 0ca52cb17ed482c6bd20c08555e03cd4aa9027b2).
# NOT the real LMCache. Own code; KV layer groups are reduced to an optional list.
from dataclasses import dataclass, field
from typing import Optional

import torch


@dataclass
class KVLayerGroup:
    """Stand-in for lmcache.v1.kv_layer_groups group (num_layers, hidden_dim_size, dtype)."""

    num_layers: int
    hidden_dim_size: int
    dtype: torch.dtype


@dataclass
class KVLayerGroupsManager:
    kv_layer_groups: list = field(default_factory=list)

    @property
    def num_groups(self) -> int:
        return len(self.kv_layer_groups)


@dataclass
class LMCacheMetadata:
    model_name: str
    world_size: int
    local_world_size: int
    worker_id: int
    local_worker_id: int
    kv_dtype: torch.dtype
    # (num_layer, 2 (1 for MLA), chunk_size, num_kv_head, head_size)
    kv_shape: tuple
    use_mla: bool = False
    role: Optional[str] = None
    first_rank = 0
    served_model_name: Optional[str] = None
    chunk_size: int = 256
    kv_layer_groups_manager: KVLayerGroupsManager = field(
        default_factory=KVLayerGroupsManager
    )
    engine_id: Optional[str] = None
    kv_connector_extra_config: Optional[dict] = None

    def is_first_rank(self) -> bool:
        return self.worker_id == self.first_rank

    def get_dtypes(self) -> list:
        groups = self.kv_layer_groups_manager.kv_layer_groups
        if groups:
            return [g.dtype for g in groups]
        return [self.kv_dtype]

    def get_shapes(self, num_tokens: Optional[int] = None) -> list:
        """Full-chunk KV_2LTD shapes: [kv_size, num_layers, num_tokens, hidden]."""
        n = self.chunk_size if num_tokens is None else num_tokens
        groups = self.kv_layer_groups_manager.kv_layer_groups
        if groups:
            kv_size = 1 if self.use_mla else 2
            return [torch.Size([kv_size, g.num_layers, n, g.hidden_dim_size])
                    for g in groups]
        s = self.kv_shape
        return [torch.Size([s[1], s[0], n, s[3] * s[4]])]

    def get_num_groups(self) -> int:
        groups = self.kv_layer_groups_manager.kv_layer_groups
        return len(groups) if groups else 1
