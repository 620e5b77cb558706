# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors vllm/utils/hashing.py (vllm-project/vllm, newest stored version, see README.md):
# `sha256` = SHA-256 over the pickle (HIGHEST_PROTOCOL) of its argument, 32 raw bytes;
# it is vLLM's default prefix-caching hash (--prefix-caching-hash-algo sha256).
import hashlib
import pickle
from typing import Any


def sha256(input: Any) -> bytes:  # noqa: A002 - real parameter name
    return hashlib.sha256(pickle.dumps(input, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def sha256_cbor(input: Any) -> bytes:  # noqa: A002
    """Real vLLM hashes canonical CBOR (cbor2); this double falls back to sorted-repr bytes."""
    return hashlib.sha256(repr(input).encode()).digest()
