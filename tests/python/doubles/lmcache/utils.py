# Test double of lmcache/utils.py (LMCache/LMCache @ 0353be824aebefb9fd4fbdca022746adbf252d3b):
# CacheEngineKey / LayerCacheEngineKey, dtype<->string tables, get_size_bytes.
# NOT the real LMCache; own code mirroring the public signatures and semantics.
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

import torch

TORCH_DTYPE_TO_STR_DTYPE = {
    torch.half: "half",
    torch.float16: "half",
    torch.bfloat16: "bfloat16",
    torch.float: "float",
    torch.float32: "float",
    torch.double: "double",
    torch.float64: "double",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.int16: "int16",
    torch.int32: "int32",
    torch.int64: "int64",
    torch.bool: "bool",
}
for _name, _s in (("float8_e4m3fn", "fp8_e4m3fn"), ("float8_e5m2", "fp8_e5m2")):
    if hasattr(torch, _name):
        TORCH_DTYPE_TO_STR_DTYPE[getattr(torch, _name)] = _s

STR_DTYPE_TO_TORCH_DTYPE = {v: k for k, v in TORCH_DTYPE_TO_STR_DTYPE.items()}


def dtype_itemsize(dtype: torch.dtype) -> int:
    """Bytes per element (torch<2.1 has no ``dtype.itemsize``)."""
    size = getattr(dtype, "itemsize", None)
    if size is None:
        size = torch.empty((), dtype=dtype).element_size()
    return int(size)


def get_size_bytes(shapes: list[torch.Size], kv_dtypes: list[torch.dtype]) -> int:
    """Sum of numel*itemsize over (shape, dtype) pairs (same as real helper)."""
    if len(shapes) != len(kv_dtypes):
        raise ValueError("shapes and dtypes must have the same length")
    total = 0
    for shape, dt in zip(shapes, kv_dtypes):
        total += torch.Size(shape).numel() * dtype_itemsize(dt)
    return total


def _tags_from_configs(request_configs: Optional[dict]):
    if not request_configs:
        return None
    tags = [
        (k[len("lmcache.tag."):], v)
        for k, v in request_configs.items()
        if k.startswith("lmcache.tag.")
    ]
    return tuple(tags) if tags else None


@dataclass(slots=True)
class CacheEngineKey:
    """Key of one KV chunk.

    ``to_string()`` -> ``model_name@world_size@worker_id@<chunk_hash hex>@<dtype str>``
    plus ``@tag%value`` for each ``lmcache.tag.*`` request config.
    """

    model_name: str
    world_size: int
    worker_id: int
    chunk_hash: int
    dtype: torch.dtype
    request_configs: Optional[dict] = field(default_factory=dict)
    tags: Optional[tuple] = field(init=False, default=None)
    _dtype_str: str = field(init=False, default="")

    def __post_init__(self):
        if self.dtype not in TORCH_DTYPE_TO_STR_DTYPE:
            raise ValueError(f"Unsupported dtype in CacheEngineKey: {self.dtype}")
        self._dtype_str = TORCH_DTYPE_TO_STR_DTYPE[self.dtype]
        self.tags = _tags_from_configs(self.request_configs)

    def _ident(self):
        return (self.model_name, self.world_size, self.worker_id,
                self.chunk_hash, self._dtype_str, self.tags)

    def __hash__(self):
        return hash(self._ident())

    def __eq__(self, other):
        return type(self) is type(other) and self._ident() == other._ident()

    @property
    def chunk_hash_hex(self) -> str:
        if isinstance(self.chunk_hash, bytes):
            return self.chunk_hash.hex()
        return format(self.chunk_hash, "x")

    def _tag_suffix(self) -> str:
        if not self.tags:
            return ""
        return "@" + "@".join(f"{k}%{v}" for k, v in self.tags)

    def to_string(self) -> str:
        return (f"{self.model_name}@{self.world_size}@{self.worker_id}"
                f"@{self.chunk_hash_hex}@{self._dtype_str}" + self._tag_suffix())

    @staticmethod
    def _parse_tags(parts: List[str], s: str) -> Optional[dict]:
        if not parts:
            return None
        cfg = {}
        for kv in parts:
            k, sep, v = kv.partition("%")
            if not sep:
                raise ValueError(f"Invalid key string: {s}")
            cfg["lmcache.tag." + k] = v
        return cfg

    @staticmethod
    def from_string(s: str) -> "CacheEngineKey":
        parts = s.split("@")
        if len(parts) < 5:
            raise ValueError(f"Invalid key string: {s}")
        return CacheEngineKey(
            model_name=parts[0],
            world_size=int(parts[1]),
            worker_id=int(parts[2]),
            chunk_hash=int(parts[3], 16),
            dtype=STR_DTYPE_TO_TORCH_DTYPE[parts[4]],
            request_configs=CacheEngineKey._parse_tags(parts[5:], s),
        )

    def with_new_worker_id(self, new_worker_id: int) -> "CacheEngineKey":
        return CacheEngineKey(self.model_name, self.world_size, new_worker_id,
                              self.chunk_hash, self.dtype, self.request_configs)

    def split_layers(self, num_layers: int) -> List["LayerCacheEngineKey"]:
        return [
            LayerCacheEngineKey(self.model_name, self.world_size, self.worker_id,
                                self.chunk_hash, self.dtype, self.request_configs,
                                layer_id=i)
            for i in range(num_layers)
        ]

    def get_first_layer(self) -> "LayerCacheEngineKey":
        return self.split_layers(1)[0]


@dataclass(slots=True)
class LayerCacheEngineKey(CacheEngineKey):
    """Per-layer key: ``...@<dtype str>@<layer_id>[@tags]``."""

    layer_id: int = 0

    def __hash__(self):
        return hash(self._ident() + (self.layer_id,))

    def __eq__(self, other):
        return (type(self) is type(other) and self._ident() == other._ident()
                and self.layer_id == other.layer_id)

    def to_string(self) -> str:
        return (f"{self.model_name}@{self.world_size}@{self.worker_id}"
                f"@{self.chunk_hash_hex}@{self._dtype_str}@{self.layer_id}"
                + self._tag_suffix())

    @staticmethod
    def from_string(s: str) -> "LayerCacheEngineKey":
        parts = s.split("@")
        if len(parts) < 6:
            raise ValueError(f"Invalid key string: {s}")
        return LayerCacheEngineKey(
            model_name=parts[0],
            world_size=int(parts[1]),
            worker_id=int(parts[2]),
            chunk_hash=int(parts[3], 16),
            dtype=STR_DTYPE_TO_TORCH_DTYPE[parts[4]],
            request_configs=CacheEngineKey._parse_tags(parts[6:], s),
            layer_id=int(parts[5]),
        )


def parse_cache_key(key_str: str):
    parts = key_str.strip().split("@")
    if len(parts) >= 6 and parts[5].isdigit():
        return LayerCacheEngineKey.from_string(key_str)
    return CacheEngineKey.from_string(key_str)


def _lmcache_nvtx_annotate(func, domain="lmcache"):
    """No-op stand-in for the real NVTX decorator."""
    return func
