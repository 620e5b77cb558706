# Test double of the legacy lmcache/config.py (LMCache/LMCache; e.g. @ 5f6f05bd72190f583a5aea11cd58756c98925dc8
# where storage_backend/__init__.py still imported `LMCacheEngineMetadata` from here).
# NOT the real LMCache. Newer LMCache moved this to lmcache/v1/metadata.py::LMCacheMetadata.
from dataclasses import dataclass
from typing import Optional, Tuple

import torch


@dataclass
class LMCacheEngineMetadata:
    """Legacy engine metadata (pre-`LMCacheMetadata`)."""

    model_name: str
    world_size: int
    worker_id: int
    fmt: str
    kv_dtype: torch.dtype
    # (num_layer, 2 or 1, chunk_size, num_kv_head, head_size)
    kv_shape: Tuple[int, int, int, int, int]
    use_mla: bool = False
    role: Optional[str] = None
