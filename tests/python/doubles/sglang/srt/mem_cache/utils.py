# TEST DOUBLE (tierkv tests), not SGLang.
# Mirrors the hashing entry point of python/sglang/srt/mem_cache/utils.py in newer SGLang,
# `get_hash_str(token_ids, prior_hash, page_size)`, which HiCacheController calls as
# `get_hash_str(tokens, last_hash, page_size=self.page_size)` (managers/cache_controller.py
# @001067fffe33427bee0ed2f007fb7551a1d76b44). The real one delegates to
# mem_cache/cpp_utils/native_hash.py@018cdcbe + hash_binding.cpp@30a90c4f; this is a pure
# Python re-implementation of the same digest, own code. See /work/specs/sglang.md.
from __future__ import annotations

import hashlib
from typing import List, Optional, Sequence, Union

_U32_MAX = 0xFFFFFFFF


def _flatten(tokens: Sequence) -> List[int]:
    out: List[int] = []
    for t in tokens:
        if isinstance(t, tuple):
            out.extend(int(e) for e in t)
        else:
            out.append(int(t))
    return out


def _hash_page(words: List[int], prior: Optional[bytes]) -> bytes:
    h = hashlib.sha256()
    if prior is not None:
        h.update(prior)
    if any(w > _U32_MAX for w in words):
        # "wide" page: a 0xff tag byte then u64 little-endian words
        h.update(b"\xff")
        for w in words:
            h.update(w.to_bytes(8, "little", signed=False))
    else:
        for w in words:
            h.update(w.to_bytes(4, "little", signed=False))
    return h.digest()


def get_hash_str(
    token_ids: Sequence,
    prior_hash: Optional[str] = None,
    page_size: Optional[int] = None,
) -> Union[str, List[str]]:
    """page_size None: one hex digest over all tokens (chained on prior_hash).
    page_size N: list of hex digests, one per N-token page (a short tail page is hashed
    too), each chained on the previous page's digest."""
    prior = bytes.fromhex(prior_hash) if prior_hash else None
    if page_size is None:
        return _hash_page(_flatten(token_ids), prior).hex()
    if page_size <= 0:
        raise ValueError("page_size must be positive")
    out: List[str] = []
    toks = list(token_ids)
    for start in range(0, len(toks), page_size):
        prior = _hash_page(_flatten(toks[start : start + page_size]), prior)
        out.append(prior.hex())
    return out


def hash_str_to_int64(hash_str: str) -> int:
    v = int(hash_str[:16], 16)
    return v - (1 << 64) if v >= (1 << 63) else v
