"""What every engine integration shares: the layout fingerprint, the store an integration
opens (embedded by default, or a master), strict option parsing and the environment.

Layout fingerprint: a short hash of everything that determines the bytes of a stored KV block
(model, KV dtype, block/page size, layout, layers, KV heads, head size, parallel placement).
It is part of every key the integrations write, so an engine configured differently reads
none of those objects: a miss, never KV of another layout (docs/engine.md).
"""

import hashlib
import json
import logging
import os
import threading

from .. import _tierkv

_log = logging.getLogger("tierkv.integrations")

#: Bumped when the integrations change how they lay bytes out in an object.
OBJECT_FORMAT_VERSION = 1


# The store's result codes the integrations act on (docs/errors.md).
_CODES = dict(_tierkv._error_codes())
OBJECT_NOT_FOUND = _CODES["OBJECT_NOT_FOUND"]
OBJECT_ALREADY_EXISTS = _CODES["OBJECT_ALREADY_EXISTS"]
NO_AVAILABLE_HANDLE = _CODES["NO_AVAILABLE_HANDLE"]


def is_stored(rc):
    """A put's result code: stored now, or stored already (same key: counts as stored)."""
    return rc == 0 or rc == OBJECT_ALREADY_EXISTS


def field_of(obj, name, default=None):
    """``obj.name`` (or ``obj[name]`` for a dict); ``default`` when obj is None or lacks it:
    the engines' config objects differ across versions and test doubles."""
    if obj is None:
        return default
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def dtype_name(dtype):
    """'bfloat16' for torch.bfloat16, 'float16' for 'half'-like names; strings pass through."""
    s = str(dtype)
    return s[len("torch."):] if s.startswith("torch.") else s


def layout_fingerprint(**fields):
    """16 hex digits of SHA-256 over the fields (sorted, JSON): equal fields, equal prints.
    Fields that are None are left out, so adding an optional field later does not change the
    prints of engines that do not set it."""
    doc = {k: (dtype_name(v) if k.endswith("dtype") else v) for k, v in fields.items()
           if v is not None}
    doc["object_format"] = OBJECT_FORMAT_VERSION
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def parse_bool(name, value):
    """JSON true/false, or "true"/"false" in any case; anything else is a ValueError naming
    the option (never a silent default)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"{name}: {value!r} is not true or false")


def parse_positive_int(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(f"{name}: {value!r} is not a positive integer")
    return value


def parse_ratio(name, value):
    try:
        r = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{name}: {value!r} is not a number in (0, 1]") from None
    if not 0.0 < r <= 1.0:
        raise ValueError(f"{name}: {value!r} is not in (0, 1]")
    return r


_SIZE_SHIFT = {"": 0, "b": 0, "k": 10, "kb": 10, "kib": 10, "m": 20, "mb": 20, "mib": 20,
               "g": 30, "gb": 30, "gib": 30, "t": 40, "tb": 40, "tib": 40}


def parse_size(name, value):
    """Bytes of a size as the store's config writes it: an integer, or a number with a
    1024-based unit ("4MB", "1.5GiB"); anything else is a ValueError naming the option."""
    if isinstance(value, bool):
        raise ValueError(f"{name}: {value!r} is not a size")
    if isinstance(value, int) and value >= 0:
        return value
    text = str(value).strip().lower()
    num = text.rstrip("abcdefghijklmnopqrstuvwxyz").strip()
    unit = text[len(num):].strip() if num else ""
    try:
        n = float(num)
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not a size such as 1024 or \"80GB\"") from None
    if n < 0 or unit not in _SIZE_SHIFT:
        raise ValueError(f"{name}: {value!r} is not a size such as 1024 or \"80GB\"")
    return int(n * (1 << _SIZE_SHIFT[unit]))


# ---- the store ------------------------------------------------------------------------------

#: An embedded store's defaults (an in-process master): one per process, shared by every
#: integration instance in it (a scheduler-side and a worker-side connector of one process see
#: the same objects).
EMBEDDED_DEFAULTS = {
    "local_hostname": "127.0.0.1",
    "metadata_server": "P2PHANDSHAKE",
    "master_server_address": "",
    "global_segment_size": "4GB",
    "local_buffer_size": "64MB",
    "protocol": "tcp",
}

# Mooncake's store config file (MOONCAKE_CONFIG_PATH) keys that are not setup keys of the same
# name, and the ones with no meaning for tierkv (accepted, logged).
_MOONCAKE_RENAMES = {"master_server_address": "master_server_address",
                     "metadata_server": "metadata_server",
                     "device_name": "device_name"}
_MOONCAKE_IGNORED = {"transfer_timeout", "storage_root_dir", "fast_transfer",
                     "fast_transfer_buffer_size", "enable_offload", "mooncake_store_config"}

_stores = {}
_stores_lock = threading.Lock()


def _read_json_file(path, what):
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise ValueError(f"{what}: cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{what}: {path} is not JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{what}: {path} must hold a JSON object")
    return doc


def store_setup_config(explicit=None, env=None):
    """The DistributedStore.setup dict an integration uses, and where it came from.

    In order: ``explicit`` (the integration's own option, a dict of setup keys), the JSON file
    named by ``TIERKV_STORE_CONFIG``, Mooncake's ``MOONCAKE_CONFIG_PATH`` (its keys:
    ``local_hostname``, ``metadata_server``, ``master_server_address``,
    ``global_segment_size``, ``local_buffer_size``, ``protocol``, ``device_name``), else an
    embedded store (``EMBEDDED_DEFAULTS``). ``MOONCAKE_REQUESTER_LOCAL_HOSTNAME`` (or
    ``TIERKV_LOCAL_HOSTNAME``) overrides ``local_hostname``. Missing keys of a partial config
    come from ``EMBEDDED_DEFAULTS``; a master address of "" means embedded."""
    env = os.environ if env is None else env
    if explicit:
        conf, source = dict(explicit), "the integration's store option"
    elif env.get("TIERKV_STORE_CONFIG"):
        path = env["TIERKV_STORE_CONFIG"]
        conf, source = _read_json_file(path, "TIERKV_STORE_CONFIG"), path
    elif env.get("MOONCAKE_CONFIG_PATH"):
        path = env["MOONCAKE_CONFIG_PATH"]
        raw = _read_json_file(path, "MOONCAKE_CONFIG_PATH")
        conf = {}
        for k, v in raw.items():
            if k in _MOONCAKE_IGNORED:
                _log.info("tierkv: %s key %r has no tierkv meaning; ignored", path, k)
                continue
            conf[_MOONCAKE_RENAMES.get(k, k)] = v
        source = path
    else:
        conf, source = {}, "embedded defaults"
    out = dict(EMBEDDED_DEFAULTS)
    out.update(conf)
    host = env.get("TIERKV_LOCAL_HOSTNAME") or env.get("MOONCAKE_REQUESTER_LOCAL_HOSTNAME")
    if host:
        out["local_hostname"] = host
    for alias in ("master_server_addr",):
        if alias in out:
            out["master_server_address"] = out.pop(alias)
    return out, source


def shared_store(setup_config):
    """The process's DistributedStore for this setup config: set up on first use, then shared
    (reference counted; ``release_store`` closes it with its last user). Raises RuntimeError
    naming the store's error when setup fails."""
    key = json.dumps(setup_config, sort_keys=True, default=str)
    with _stores_lock:
        entry = _stores.get(key)
        if entry is None:
            store = _tierkv.DistributedStore()
            rc = store.setup(setup_config)
            if rc != 0:
                raise RuntimeError(f"tierkv store setup failed ({_tierkv.strerror(rc)}): "
                                   f"{store.last_error()}")
            where = setup_config.get("master_server_address") or "embedded (in-process master)"
            _log.info("tierkv: store set up, master %s", where)
            entry = _stores[key] = [store, 0]
        entry[1] += 1
        return entry[0]


def release_store(store):
    with _stores_lock:
        for key, entry in list(_stores.items()):
            if entry[0] is store:
                entry[1] -= 1
                if entry[1] == 0:
                    del _stores[key]
                    store.close()
                return


def env_ratio(names, default, env=None):
    """The first of ``names`` set in the environment, as a ratio in (0, 1]; else default."""
    env = os.environ if env is None else env
    for n in names:
        if env.get(n):
            return parse_ratio(n, env[n])
    return default


def env_bool(names, default, env=None):
    """The first of ``names`` set: 1/0 or true/false (any case); anything else is a
    ValueError naming the variable."""
    env = os.environ if env is None else env
    for n in names:
        v = env.get(n)
        if v:
            if v.strip() in ("1", "0"):
                return v.strip() == "1"
            return parse_bool(n, v)
    return default
