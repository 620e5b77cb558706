# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors ForwardContext / get_forward_context / set_forward_context from
# vllm/forward_context.py (vllm-project/vllm main), reduced to the fields a connector reads:
# attn_metadata is dict[layer_name, AttentionMetadata] (or None in a no-forward step);
# no_compile_layers maps layer_name -> Attention module (which has .kv_cache[virtual_engine]).
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ForwardContext:
    no_compile_layers: dict[str, Any] = field(default_factory=dict)
    attn_metadata: Any = None
    virtual_engine: int = 0
    dp_metadata: Any = None


_forward_context: ForwardContext | None = None


def is_forward_context_available() -> bool:
    return _forward_context is not None


def get_forward_context() -> ForwardContext:
    assert _forward_context is not None, "Forward context is not set."
    return _forward_context


@contextmanager
def set_forward_context(attn_metadata: Any, vllm_config: Any = None, virtual_engine: int = 0,
                        no_compile_layers: dict[str, Any] | None = None, **_: Any):
    global _forward_context
    prev = _forward_context
    _forward_context = ForwardContext(no_compile_layers=no_compile_layers or {},
                                      attn_metadata=attn_metadata,
                                      virtual_engine=virtual_engine)
    try:
        yield
    finally:
        _forward_context = prev
