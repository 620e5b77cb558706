# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors vllm/v1/kv_cache_interface.py @ bc8282e61df21719b12b391c3a976b1c900dfbb4
# (vllm-project/vllm): frozen kw_only spec dataclasses, KVCacheTensor, KVCacheGroupSpec,
# KVCacheConfig. `dtype` is whatever the caller passes (torch.dtype in real vLLM); the
# element size comes from dtype.itemsize when present, else 2.
from dataclasses import dataclass, field
from typing import Any


def _dtype_size(dtype: Any) -> int:
    return int(getattr(dtype, "itemsize", 2))


@dataclass(frozen=True)
class KVCacheSpec:
    block_size: int

    @property
    def page_size_bytes(self) -> int:
        raise NotImplementedError


@dataclass(frozen=True, kw_only=True)
class AttentionSpec(KVCacheSpec):
    num_kv_heads: int
    head_size: int
    dtype: Any
    page_size_padded: int | None = None

    @property
    def page_size_bytes(self) -> int:
        real = self.real_page_size_bytes
        return self.page_size_padded if self.page_size_padded is not None else real

    @property
    def real_page_size_bytes(self) -> int:  # K and V
        return 2 * self.block_size * self.num_kv_heads * self.head_size * _dtype_size(self.dtype)


@dataclass(frozen=True, kw_only=True)
class FullAttentionSpec(AttentionSpec):
    head_size_v: int = None  # type: ignore[assignment]  # defaults to head_size
    sliding_window: int | None = None
    attention_chunk_size: int | None = None

    def __post_init__(self):
        if self.head_size_v is None:
            object.__setattr__(self, "head_size_v", self.head_size)

    @property
    def real_page_size_bytes(self) -> int:
        return (self.block_size * self.num_kv_heads * (self.head_size + self.head_size_v)
                * _dtype_size(self.dtype))


@dataclass(frozen=True, kw_only=True)
class MLAAttentionSpec(FullAttentionSpec):
    cache_dtype_str: str | None = None

    @property
    def real_page_size_bytes(self) -> int:  # one latent vector per token, no K/V pair
        if self.cache_dtype_str == "fp8_ds_mla":
            return self.block_size * 656
        return self.block_size * self.num_kv_heads * self.head_size * _dtype_size(self.dtype)


@dataclass(frozen=True, kw_only=True)
class SlidingWindowSpec(AttentionSpec):
    sliding_window: int


@dataclass(frozen=True, kw_only=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    attention_chunk_size: int


@dataclass(frozen=True)
class MambaSpec(KVCacheSpec):
    shapes: tuple = ()
    dtypes: tuple = ()
    page_size_padded: int | None = None
    mamba_type: str = "mamba2"
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0


@dataclass(frozen=True)
class UniformTypeKVCacheSpecs(KVCacheSpec):
    kv_cache_specs: dict = field(default_factory=dict)


@dataclass
class KVCacheTensor:
    size: int  # bytes
    shared_by: list[str]  # layer names sharing this allocation


@dataclass
class KVCacheGroupSpec:
    layer_names: list[str]
    kv_cache_spec: KVCacheSpec


@dataclass
class KVCacheConfig:
    num_blocks: int
    kv_cache_tensors: list[KVCacheTensor]
    kv_cache_groups: list[KVCacheGroupSpec]
