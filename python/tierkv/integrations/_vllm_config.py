"""The options of tierkv's vLLM connector (``kv_connector_extra_config``) and the facts it
reads from vLLM's config objects (model, KV-cache groups, parallel placement)."""

import os
import re
from dataclasses import dataclass, field

from ._common import (
    dtype_name,
    field_of,
    env_bool,
    env_ratio,
    layout_fingerprint,
    parse_bool,
    parse_positive_int,
)

# Keys of kv_connector_extra_config; any other is a ValueError naming it.
EXTRA_DEFAULTS = {
    "load_async": True,                 # Mooncake's store connector: loads outside forwards
    "lookup_async": False,              # lookups on a thread; (None, False) until done
    "enable_cross_layers_blocks": False,  # one object per block holding every layer
    "lookup_rpc_port": None,            # accepted: tierkv's scheduler asks the master itself
    "cache_prefix": "",                 # a deployment's namespace (keys, group ids)
    "enable_group_semantics": False,    # every layer of a chunk in one eviction group
    "staging_buffer_size": 256 << 20,   # registered host staging, bytes (2 load + 6 save slots)
    "load_batch_bytes": 64 << 20,       # at most this many bytes per batch_get_into
    "remote_wait_s": 5.0,               # consumer: wait this long for a producer's blocks
    "store": None,                      # DistributedStore.setup keys (else env, else embedded)
    "master_server_address": None,      # shortcut: join this master (store config from env)
    # BlockRemoved events (with vLLM's KV events on): how often and how many keys a sweep of
    # the blocks this scheduler announced checks, and how many blocks it tracks at most.
    "removed_check_interval_s": 1.0,
    "removed_check_keys": 65536,
    "removed_track_blocks": 262144,
}


@dataclass
class Options:
    load_async: bool
    lookup_async: bool
    cross_layers: bool
    cache_prefix: str
    group_semantics: bool
    staging_buffer_size: int
    load_batch_bytes: int
    remote_wait_s: float
    store: dict
    tier_log: bool
    disk_staging_usable_ratio: float
    preferred_segment: str
    removed_check_interval_s: float = 1.0
    removed_check_keys: int = 65536
    removed_track_blocks: int = 262144


def parse_options(extra, env=None):
    env = os.environ if env is None else env
    extra = dict(extra or {})
    unknown = set(extra) - set(EXTRA_DEFAULTS)
    if unknown:
        raise ValueError(f"kv_connector_extra_config: unknown key(s) {sorted(unknown)} "
                         f"(tierkv accepts {sorted(EXTRA_DEFAULTS)})")
    v = dict(EXTRA_DEFAULTS)
    v.update(extra)
    port = v["lookup_rpc_port"]
    if port is not None:
        parse_positive_int("lookup_rpc_port", int(port) if isinstance(port, str)
                           and port.isdigit() else port)
    if not isinstance(v["cache_prefix"], str) or "@" in v["cache_prefix"]:
        raise ValueError(f"cache_prefix: {v['cache_prefix']!r} must be a string without '@'")
    wait = _non_negative("remote_wait_s", v["remote_wait_s"])
    interval = _non_negative("removed_check_interval_s", v["removed_check_interval_s"])
    if interval == 0:
        raise ValueError("removed_check_interval_s must be > 0")
    store = v["store"]
    if store is not None and not isinstance(store, dict):
        raise ValueError("store: must be a JSON object of DistributedStore.setup keys")
    store = dict(store or {})
    if v["master_server_address"] is not None:
        store["master_server_address"] = str(v["master_server_address"])
    return Options(
        load_async=parse_bool("load_async", v["load_async"]),
        lookup_async=parse_bool("lookup_async", v["lookup_async"]),
        cross_layers=parse_bool("enable_cross_layers_blocks", v["enable_cross_layers_blocks"]),
        cache_prefix=v["cache_prefix"],
        group_semantics=parse_bool("enable_group_semantics", v["enable_group_semantics"]),
        staging_buffer_size=parse_positive_int("staging_buffer_size", v["staging_buffer_size"]),
        load_batch_bytes=parse_positive_int("load_batch_bytes", v["load_batch_bytes"]),
        remote_wait_s=wait,
        store=store,
        tier_log=env_bool(["TIERKV_TIER_LOG", "VLLM_MOONCAKE_STORE_TIER_LOG"], False, env),
        disk_staging_usable_ratio=env_ratio(
            ["TIERKV_DISK_STAGING_USABLE_RATIO", "VLLM_MOONCAKE_DISK_STAGING_USABLE_RATIO"],
            0.9, env),
        preferred_segment=(env.get("TIERKV_PREFERRED_SEGMENT")
                           or env.get("MOONCAKE_PREFERRED_SEGMENT") or ""),
        removed_check_interval_s=interval,
        removed_check_keys=parse_positive_int("removed_check_keys", v["removed_check_keys"]),
        removed_track_blocks=parse_positive_int("removed_track_blocks",
                                                v["removed_track_blocks"]),
    )


def _non_negative(name, value):
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {value!r} is not a number") from None
    if out < 0 or out != out:
        raise ValueError(f"{name} must be >= 0")
    return out


_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def layer_index(name, fallback):
    """The model layer index in a vLLM layer name ("model.layers.12.self_attn.attn" -> 12),
    as vLLM's extract_layer_index reads it; ``fallback`` when the name has none."""
    found = _LAYER_INDEX.findall(f".{name}.")
    return int(found[0]) if len(found) == 1 else fallback


@dataclass
class GroupInfo:
    index: int
    kind: str             # the spec's class name: FullAttentionSpec, SlidingWindowSpec, ...
    block_size: int
    layer_names: list
    num_kv_heads: int = 0
    head_size: int = 0
    dtype: str = ""
    sliding_window: int = 0
    # Mamba: every layer holds state tensors ([num_blocks, *shape] each), not KV; block i holds
    # the state after token (i + 1) * block_size when vLLM's mamba_cache_mode is "all".
    is_state: bool = False
    state: tuple = ()     # ((shape, dtype), ...) of the state tensors, and the cache mode


@dataclass
class EngineFacts:
    model: str
    block_size: int
    groups: list
    tp_rank: int = 0
    tp_size: int = 1
    pp_size: int = 1
    pcp_size: int = 1
    dcp_size: int = 1
    num_layers: int = 0
    use_mla: bool = False
    layout: str = "NHD"
    kv_dtype: str = ""
    extra: dict = field(default_factory=dict)

    def fingerprint(self, cross_layers):
        return layout_fingerprint(
            model=self.model, kv_dtype=self.kv_dtype, block_size=self.block_size,
            layout=self.layout, objects="cross_layer" if cross_layers else "per_layer",
            num_layers=self.num_layers, tp_size=self.tp_size, pp_size=self.pp_size,
            pcp_size=self.pcp_size, dcp_size=self.dcp_size, mla=self.use_mla,
            groups=[[g.kind, g.block_size, g.num_kv_heads, g.head_size, g.dtype,
                     g.sliding_window, len(g.layer_names)] + ([repr(g.state)] if g.is_state
                                                              else [])
                    for g in self.groups])


def engine_facts(vllm_config, kv_cache_config):
    """What determines the bytes and placement of the KV blocks, from vLLM's configs."""
    mc = field_of(vllm_config, "model_config")
    cc = field_of(vllm_config, "cache_config")
    pc = field_of(vllm_config, "parallel_config")
    model = str(field_of(mc, "model", "") or field_of(mc, "served_model_name", "") or "model")
    block_size = int(field_of(cc, "block_size", 16) or 16)
    model_dtype = dtype_name(field_of(mc, "dtype", ""))
    cache_dtype = str(field_of(cc, "cache_dtype", "auto") or "auto")
    kv_dtype = model_dtype if cache_dtype == "auto" else cache_dtype
    groups = []
    specs = field_of(kv_cache_config, "kv_cache_groups") or []
    for i, gs in enumerate(specs):
        spec = field_of(gs, "kv_cache_spec")
        kind = type(spec).__name__ if spec is not None else "FullAttentionSpec"
        groups.append(GroupInfo(
            index=i, kind=kind,
            block_size=int(field_of(spec, "block_size", block_size) or block_size),
            layer_names=list(field_of(gs, "layer_names", []) or []),
            num_kv_heads=int(field_of(spec, "num_kv_heads", 0) or 0),
            head_size=int(field_of(spec, "head_size", 0) or 0),
            dtype=dtype_name(field_of(spec, "dtype", kv_dtype)),
            sliding_window=int(field_of(spec, "sliding_window", 0) or 0),
            **_state_facts(i, kind, spec)))
    num_layers = sum(len(g.layer_names) for g in groups)
    if not groups:
        heads = _call(mc, "get_total_num_kv_heads") or 0
        groups.append(GroupInfo(0, "FullAttentionSpec", block_size, [],
                                num_kv_heads=int(heads), head_size=int(_call(mc, "get_head_size")
                                                                       or 0),
                                dtype=kv_dtype))
        num_layers = int(field_of(field_of(mc, "hf_config"), "num_hidden_layers", 0) or 0)
    return EngineFacts(
        model=model, block_size=block_size, groups=groups,
        tp_rank=int(field_of(pc, "rank", 0) or 0) % max(1, int(field_of(pc, "tensor_parallel_size", 1)
                                                          or 1)),
        tp_size=int(field_of(pc, "tensor_parallel_size", 1) or 1),
        pp_size=int(field_of(pc, "pipeline_parallel_size", 1) or 1),
        pcp_size=int(field_of(pc, "prefill_context_parallel_size", 1) or 1),
        dcp_size=int(field_of(pc, "decode_context_parallel_size", 1) or 1),
        num_layers=num_layers, use_mla=bool(field_of(mc, "use_mla", False)),
        layout=os.environ.get("VLLM_KV_CACHE_LAYOUT", "NHD") or "NHD", kv_dtype=kv_dtype)


def _state_facts(index, kind, spec):
    """A Mamba group's state shapes and dtypes; refused unless vLLM caches a state at every
    block boundary (mamba_cache_mode "all"): with "align" a state exists only where a
    scheduler step ended, and the block a connector hit would load into is vLLM's null block."""
    if "Mamba" not in kind:
        return {}
    mode = str(field_of(spec, "mamba_cache_mode", "none") or "none")
    if mode != "all":
        raise ValueError(
            f"KV-cache group {index} ({kind}) has mamba_cache_mode {mode!r}: tierkv stores "
            "Mamba states only with mamba_cache_mode 'all' (a state at every block boundary; "
            "vLLM's default with prefix caching on)")
    shapes = [tuple(int(n) for n in s) for s in (field_of(spec, "shapes", ()) or ())]
    dtypes = [dtype_name(d) for d in (field_of(spec, "dtypes", ()) or ())]
    return {"is_state": True, "state": (tuple(zip(shapes, dtypes)), mode)}


def _call(obj, name):
    fn = field_of(obj, name)
    try:
        return fn() if callable(fn) else None
    except Exception:  # a partial config of a test or an older vLLM
        return None
