# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors the block-hash part of vllm/v1/core/kv_cache_utils.py (vllm-project/vllm main,
# the version with init_none_hash/DEFAULT_NONE_HASH_SEED and lora_name extra keys):
#   BlockHash = bytes; hash(block i) = hash_fn((parent or NONE_HASH, tuple(tokens), extra))
#   extra = tuple(lora_name] + mm (identifier, offset-in-block) + [cache_salt if block 0]
#           + prompt-embeds digests) or None; only full blocks are hashed.
import os
from collections.abc import Callable, Sequence
from typing import Any, NewType

from vllm.utils.hashing import sha256

BlockHash = NewType("BlockHash", bytes)
ExternalBlockHash = bytes | int
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"
NONE_HASH: BlockHash
_NONE_HASH_SEED: str | None = None


def init_none_hash(hash_fn: Callable[[Any], bytes]) -> None:
    """PYTHONHASHSEED if set, else the fixed default seed (real: random for xxhash)."""
    global NONE_HASH, _NONE_HASH_SEED
    _NONE_HASH_SEED = os.getenv("PYTHONHASHSEED") or DEFAULT_NONE_HASH_SEED
    NONE_HASH = BlockHash(hash_fn(_NONE_HASH_SEED))


init_none_hash(sha256)  # real vLLM: EngineCore calls this with the configured algorithm


def generate_block_hash_extra_keys(request, start_token_idx: int, end_token_idx: int,
                                   start_mm_idx: int) -> tuple[tuple[Any, ...] | None, int]:
    lora = getattr(request, "lora_request", None)
    lora_keys = [lora.lora_name] if lora else []
    mm_keys = []
    idx = start_mm_idx if start_mm_idx >= 0 else max(0, len(request.mm_features) + start_mm_idx)
    for feat in request.mm_features[idx:]:
        off, length = feat.mm_position.offset, feat.mm_position.length
        if off >= end_token_idx:
            break
        if start_token_idx < off + length:
            mm_keys.append((feat.identifier, off - start_token_idx))
        if end_token_idx >= off + length:
            idx += 1
        else:
            break
    salt = [request.cache_salt] if (start_token_idx == 0 and request.cache_salt) else []
    keys = lora_keys + mm_keys + salt
    return (tuple(keys) if keys else None), idx


def hash_block_tokens(hash_function: Callable[[Any], bytes], parent_block_hash: BlockHash | None,
                      curr_block_token_ids: Sequence[int],
                      extra_keys: tuple[Any, ...] | None = None) -> BlockHash:
    parent = parent_block_hash if parent_block_hash else NONE_HASH
    return BlockHash(hash_function((parent, tuple(curr_block_token_ids), extra_keys)))


def get_request_block_hasher(hash_block_size: int, caching_hash_fn: Callable[[Any], bytes]):
    """Returns fn(request) -> hashes of the request's new full blocks (appended by Request)."""

    def request_block_hasher(request) -> list[BlockHash]:
        start = len(request.block_hashes) * hash_block_size
        n = request.num_tokens
        prev = request.block_hashes[-1] if request.block_hashes else None
        mm_idx = 0 if start == 0 else -1
        out: list[BlockHash] = []
        while start + hash_block_size <= n:
            end = start + hash_block_size
            extra, mm_idx = generate_block_hash_extra_keys(request, start, end, mm_idx)
            prev = hash_block_tokens(caching_hash_fn, prev, request.all_token_ids[start:end],
                                     extra)
            out.append(prev)
            start = end
        return out

    return request_block_hasher


class KVCacheBlock:
    """Block metadata: id, and the hash once the block is full and cached (else None)."""

    __slots__ = ("block_id", "ref_cnt", "_block_hash", "is_null")

    def __init__(self, block_id: int, block_hash: bytes | None = None, is_null: bool = False):
        self.block_id = block_id
        self.ref_cnt = 0
        self._block_hash = block_hash
        self.is_null = is_null

    @property
    def block_hash(self):
        return self._block_hash

    def __repr__(self) -> str:
        return f"KVCacheBlock(block_id={self.block_id})"
