# Test double of lmcache/v1/config.py (+ config_base.py) (LMCache/LMCache, dev branch as indexed;
# the `_CONFIG_DEFINITIONS` table with `storage_plugins` / `remote_storage_plugins`).
# NOT the real LMCache: only the fields a storage backend / tierkv's tests touch,
# with the real names, defaults and LMCACHE_* env / YAML loading behaviour.
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Optional
import json
import os

# deprecated name -> current name (subset of the real _CONFIG_ALIASES)
_CONFIG_ALIASES = {
    "external_backends": "storage_plugins",
    "plugin_locations": "runtime_plugin_locations",
}


def _to_bool(v) -> bool:
    if isinstance(v, bool):
        return v
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def _to_str_list(v):
    if v is None or isinstance(v, list):
        return v
    return [s.strip() for s in str(v).split(",") if s.strip()]


def _to_dict(v):
    if v is None or isinstance(v, dict):
        return v
    return json.loads(v)


@dataclass
class LMCacheEngineConfig:
    chunk_size: int = 256
    local_cpu: bool = True
    max_local_cpu_size: float = 5.0  # GB
    reserve_local_cpu_size: float = 0.0
    local_disk: Optional[str] = None
    max_local_disk_size: float = 0.0
    remote_url: Optional[str] = None
    remote_serde: Optional[str] = "naive"
    use_layerwise: bool = False
    save_decode_cache: bool = False
    enable_blending: bool = False
    enable_p2p: bool = False
    enable_pd: bool = False
    enable_controller: bool = False
    lmcache_instance_id: Optional[str] = None
    gds_path: Optional[str] = None
    maru_path: Optional[str] = None
    nixl_buffer_device: Optional[str] = None
    cache_policy: str = "LRU"
    save_unfull_chunk: bool = False
    blocking_timeout_secs: int = 10
    runtime_plugin_locations: Optional[list] = None
    storage_plugins: Optional[list] = None
    remote_storage_plugins: Optional[list] = None
    extra_config: Optional[dict] = None
    _extras: dict = field(default_factory=dict, repr=False)

    # ---- construction -------------------------------------------------
    @classmethod
    def _field_names(cls):
        return {f.name for f in fields(cls) if not f.name.startswith("_")}

    @classmethod
    def from_defaults(cls, **kwargs) -> "LMCacheEngineConfig":
        return cls.from_dict(kwargs)

    @classmethod
    def from_dict(cls, d: dict) -> "LMCacheEngineConfig":
        names = cls._field_names()
        known, unknown = {}, {}
        for k, v in (d or {}).items():
            k = _CONFIG_ALIASES.get(k, k)
            (known if k in names else unknown)[k] = v
        cfg = cls(**known)
        cfg._extras = unknown
        cfg.validate()
        return cfg

    @classmethod
    def from_file(cls, path: str) -> "LMCacheEngineConfig":
        """YAML file (what LMCACHE_CONFIG_FILE points to)."""
        with open(path) as f:
            text = f.read()
        try:
            import yaml  # type: ignore

            data = yaml.safe_load(text) or {}
        except ImportError:
            data = json.loads(text)
        return cls.from_dict(data)

    @classmethod
    def from_env(cls) -> "LMCacheEngineConfig":
        """Each field <name> is read from env LMCACHE_<NAME> (upper case)."""
        conv = {
            bool: _to_bool, int: int, float: float,
        }
        d: dict[str, Any] = {}
        names = cls._field_names() | set(_CONFIG_ALIASES)
        for name in names:
            raw = os.environ.get("LMCACHE_" + name.upper())
            if raw is None:
                continue
            target = _CONFIG_ALIASES.get(name, name)
            default = getattr(cls, target, None)
            if target in ("storage_plugins", "remote_storage_plugins",
                          "runtime_plugin_locations"):
                d[target] = _to_str_list(raw)
            elif target == "extra_config":
                d[target] = _to_dict(raw)
            elif type(default) in conv:
                d[target] = conv[type(default)](raw)
            else:
                d[target] = raw
        return cls.from_dict(d)

    @classmethod
    def load(cls) -> "LMCacheEngineConfig":
        """What integrations do: file if LMCACHE_CONFIG_FILE is set, else env."""
        path = os.environ.get("LMCACHE_CONFIG_FILE")
        return cls.from_file(path) if path else cls.from_env()

    # ---- helpers --------------------------------------------------------
    def validate(self) -> "LMCacheEngineConfig":
        if self.chunk_size <= 0:
            raise ValueError("chunk_size must be > 0")
        return self

    def get_extra_config_value(self, key: str, default: Any = None) -> Any:
        if self.extra_config is None:
            return default
        return self.extra_config.get(key, default)

    def __getattr__(self, name: str):
        # Unknown-but-present YAML keys behave like attributes.
        extras = self.__dict__.get("_extras", {})
        if name in extras:
            return extras[name]
        raise AttributeError(name)
