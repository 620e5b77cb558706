# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors KVCacheBlocks from vllm/v1/core/kv_cache_manager.py (vllm-project/vllm main):
# blocks[group][i]; get_block_ids() -> tuple(list[int] per KV-cache group).
from collections.abc import Sequence
from dataclasses import dataclass

from vllm.v1.core.kv_cache_utils import KVCacheBlock


@dataclass
class KVCacheBlocks:
    blocks: tuple[Sequence[KVCacheBlock], ...]

    @classmethod
    def from_block_ids(cls, *groups: Sequence[int]) -> "KVCacheBlocks":
        """Double-only helper: one list of block ids per group, all unhashed."""
        return cls(tuple([KVCacheBlock(b) for b in g] for g in groups))

    def __add__(self, other: "KVCacheBlocks") -> "KVCacheBlocks":
        return KVCacheBlocks(tuple(list(a) + list(b) for a, b in zip(self.blocks, other.blocks)))

    def get_block_ids(self, allow_none: bool = False) -> tuple[list[int], ...] | None:
        if allow_none and all(len(g) == 0 for g in self.blocks):
            return None
        return tuple([blk.block_id for blk in g] for g in self.blocks)

    def get_unhashed_block_ids(self) -> list[int]:
        assert len(self.blocks) == 1, "Only one group is supported"
        return [b.block_id for b in self.blocks[0] if b.block_hash is None]

    def get_unhashed_block_ids_all_groups(self) -> list[list[int]]:
        return [[b.block_id for b in g if b.block_hash is None and not b.is_null]
                for g in self.blocks]

    def new_empty(self) -> "KVCacheBlocks":
        return KVCacheBlocks(tuple(() for _ in range(len(self.blocks))))
