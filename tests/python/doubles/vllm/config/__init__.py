# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors the field names a KV connector reads from vllm/config/{vllm,model,cache,parallel,
# scheduler}.py (vllm-project/vllm main). Real configs are pydantic dataclasses with many
# more fields; ModelConfig's getters derive from the HF config - here they are plain fields.
from dataclasses import dataclass, field
from typing import Any

from vllm.config.kv_transfer import KVTransferConfig


@dataclass
class ModelConfig:
    model: str = "facebook/opt-125m"
    dtype: Any = "float16"  # real: torch.dtype after resolution
    max_model_len: int = 4096
    use_mla: bool = False
    num_layers: int = 2
    num_kv_heads: int = 2  # total (before TP split)
    head_size: int = 64
    served_model_name: str | None = None

    def get_num_layers(self, parallel_config: "ParallelConfig") -> int:
        # real: layers owned by this pipeline stage
        pp = max(1, parallel_config.pipeline_parallel_size)
        return self.num_layers // pp

    def get_total_num_kv_heads(self) -> int:
        return self.num_kv_heads

    def get_num_kv_heads(self, parallel_config: "ParallelConfig") -> int:
        # real: max(1, total_kv_heads // tp) (MLA: 1)
        if self.use_mla:
            return 1
        return max(1, self.num_kv_heads // max(1, parallel_config.tensor_parallel_size))

    def get_head_size(self) -> int:
        return self.head_size


@dataclass
class CacheConfig:
    block_size: int = 16
    cache_dtype: str = "auto"
    enable_prefix_caching: bool = True
    prefix_caching_hash_algo: str = "sha256"
    num_gpu_blocks: int | None = None


@dataclass
class ParallelConfig:
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    data_parallel_rank: int = 0
    decode_context_parallel_size: int = 1
    rank: int = 0  # global worker rank

    @property
    def world_size(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass
class SchedulerConfig:
    # Real default is resolved by VllmConfig; the factory refuses a connector without
    # SupportsHMA while the hybrid KV cache manager is enabled.
    disable_hybrid_kv_cache_manager: bool = True
    max_num_batched_tokens: int = 2048


@dataclass
class VllmConfig:
    model_config: ModelConfig = field(default_factory=ModelConfig)
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    parallel_config: ParallelConfig = field(default_factory=ParallelConfig)
    scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)
    kv_transfer_config: KVTransferConfig | None = None


__all__ = ["CacheConfig", "KVTransferConfig", "ModelConfig", "ParallelConfig",
           "SchedulerConfig", "VllmConfig"]
