"""tierkv as an LMCache storage backend (docs/engine.md, "LMCache").

LMCache loads it by configuration alone, as a storage plugin::

    # lmcache.yaml (LMCACHE_CONFIG_FILE)
    chunk_size: 256
    local_cpu: true
    storage_plugins: ["tierkv"]
    extra_config:
      storage_plugin.tierkv.module_path: tierkv.integrations.lmcache
      storage_plugin.tierkv.class_name: TierkvBackend
      tierkv.master_server_address: "10.0.0.1:50051"   # omit: an embedded store

(older LMCache: ``external_backends`` with ``external_backend.tierkv.*`` keys; the constructor
takes both call forms).

Memory objects move zero-copy: LMCache's pinned CPU buffer (its allocator's) is registered
with the store once; a put reads an object's bytes from there, a get allocates the object from
LMCache's local CPU backend and reads straight into it. Beside each object lies a 512-byte
header naming its shape, dtype and format (a get reads the headers first to allocate the right
object; header and data are two objects of one eviction group), under a key carrying a
layout fingerprint::

    [cache_prefix@]lmcache@<model>@fp:<fingerprint>@<CacheEngineKey.to_string()>
"""

import json
import logging
import struct
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

from .. import _tierkv
from ..connector import model_name as _model_name
from . import _common

_log = logging.getLogger("tierkv.integrations.lmcache")

try:
    from lmcache.v1.storage_backend.abstract_backend import StoragePluginInterface as _Base
    HAVE_LMCACHE = True
except ImportError:
    try:  # older LMCache: external backends subclass the plain interface
        from lmcache.v1.storage_backend.abstract_backend import (
            StorageBackendInterface as _Base,
        )
        HAVE_LMCACHE = True
    except ImportError:  # standalone: the same methods, no LMCache import anywhere in tierkv
        HAVE_LMCACHE = False

        class _Base:
            def __init__(self, dst_device="cuda", **kwargs):
                self.dst_device = dst_device


# Header object: magic, version, JSON length, then JSON {"shapes", "dtypes", "fmt", "bytes"}
# (a memory object may hold several tensors: LMCache's multi-group objects), zero-padded.
_MAGIC = b"TKVL"
_HEAD = struct.Struct("<4sHH")
HEADER_BYTES = 512
_HEADER_SUFFIX = "@hdr"  # the header object's key: the data key + this

_DTYPE_BY_NAME = {n: getattr(torch, n) for n in (
    "float32", "float16", "bfloat16", "uint8", "int8", "float64", "int32", "int64",
    "float8_e4m3fn", "float8_e5m2") if hasattr(torch, n)}


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


def _call_or(obj, name, default):
    fn = getattr(obj, name, None)
    try:
        return fn() if callable(fn) else default
    except Exception:  # an object kind without that accessor
        return default


def _parse_header(raw):
    try:
        magic, version, n = _HEAD.unpack(raw[:_HEAD.size])
        if magic != _MAGIC or version != 1 or n > HEADER_BYTES - _HEAD.size:
            return None
        doc = json.loads(raw[_HEAD.size:_HEAD.size + n])
        if (len(doc["shapes"]) != len(doc["dtypes"]) or not doc["shapes"]
                or any(d not in _DTYPE_BY_NAME for d in doc["dtypes"])):
            return None
        return doc
    except (ValueError, KeyError, TypeError, struct.error):
        return None

_EXTRA_PREFIX = "tierkv."
_OWN_KEYS = {"master_server_address", "store", "cache_prefix", "put_threads"}


def _extra_options(config):
    """The ``tierkv.*`` keys of LMCache's ``extra_config`` (an unknown one is an error)."""
    extra = _common.field_of(config, "extra_config", None) or {}
    own = {k[len(_EXTRA_PREFIX):]: v for k, v in extra.items() if k.startswith(_EXTRA_PREFIX)}
    unknown = set(own) - _OWN_KEYS
    if unknown:
        raise ValueError(f"LMCache extra_config: unknown key(s) "
                         f"{sorted(_EXTRA_PREFIX + k for k in unknown)} (tierkv reads "
                         f"{sorted(_EXTRA_PREFIX + k for k in _OWN_KEYS)})")
    return own


def _fmt_code(fmt):
    v = getattr(fmt, "value", fmt)
    return int(v) if isinstance(v, int) else 0


def _find_pinned_buffer(allocator):
    """The tensor behind LMCache's CPU allocator (its pinned buffer), or None."""
    seen = set()
    todo = [allocator]
    while todo:
        a = todo.pop(0)
        if a is None or id(a) in seen:
            continue
        seen.add(id(a))
        for name in ("buffer", "_buffer", "kv_cache_buffer"):
            t = getattr(a, name, None)
            if isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.numel() > 0:
                return t
        for name in ("pin_allocator", "cpu_allocator", "allocator", "memory_allocator",
                     "base_allocator"):
            todo.append(getattr(a, name, None))
    return None


class TierkvBackend(_Base):
    """An LMCache ``StorageBackendInterface`` backed by tierkv, constructed by LMCache's
    dynamic-backend loader as ``(config, metadata, loop, memory_allocator,
    local_cpu_backend, dst_device, lookup_server)``."""

    def __init__(self, config=None, metadata=None, loop=None, memory_allocator=None,
                 local_cpu_backend=None, dst_device="cpu", lookup_server=None):
        # Current LMCache passes keywords (config, dst_device, metadata, local_cpu_backend,
        # loop); older releases passed (config, metadata, loop, memory_allocator,
        # local_cpu_backend, dst_device, lookup_server) by position.
        try:
            super().__init__(dst_device=dst_device, config=config, metadata=metadata,
                             local_cpu_backend=local_cpu_backend, loop=loop)
        except TypeError:
            super().__init__(dst_device=dst_device)
        self.config = config
        self.metadata = metadata
        self.loop = loop
        self.local_cpu_backend = local_cpu_backend
        if memory_allocator is None and local_cpu_backend is not None:
            get = getattr(local_cpu_backend, "get_memory_allocator", None)
            memory_allocator = get() if callable(get) else getattr(
                local_cpu_backend, "memory_allocator", None)
        self.memory_allocator = memory_allocator
        opts = _extra_options(config)
        store_conf = opts.get("store") or {}
        if not isinstance(store_conf, dict):
            raise ValueError("tierkv.store: must be a mapping of DistributedStore.setup keys")
        store_conf = dict(store_conf)
        if opts.get("master_server_address"):
            store_conf["master_server_address"] = str(opts["master_server_address"])
        prefix = opts.get("cache_prefix", "") or ""
        if not isinstance(prefix, str) or "@" in prefix:
            raise ValueError(f"tierkv.cache_prefix: {prefix!r} must be a string without '@'")
        threads = _common.parse_positive_int("tierkv.put_threads", opts.get("put_threads", 1))
        setup, source = _common.store_setup_config(store_conf)
        self.store = _common.shared_store(setup)
        self.fingerprint = _common.layout_fingerprint(
            engine="lmcache", model=str(_common.field_of(metadata, "model_name", "")),
            kv_dtype=_common.field_of(metadata, "kv_dtype", None),
            kv_shape=list(_common.field_of(metadata, "kv_shape", ()) or ()),
            fmt=str(_common.field_of(metadata, "fmt", "")), world_size=_common.field_of(metadata, "world_size", None),
            mla=bool(_common.field_of(metadata, "use_mla", False)),
            chunk_size=_common.field_of(config, "chunk_size", None))
        model = _model_name(str(_common.field_of(metadata, "model_name", "") or "model"))
        self.prefix = f"{prefix + '@' if prefix else ''}lmcache@{model}@fp:{self.fingerprint}@"
        # The pinned buffer LMCache allocates memory objects from: registered once. Without
        # a local CPU backend (LMCache's scheduler side) there are no objects to move: queries
        # only.
        self._registered = []
        if self.memory_allocator is not None:
            buf = _find_pinned_buffer(self.memory_allocator)
            if buf is None:
                raise RuntimeError("tierkv: LMCache's CPU allocator exposes no buffer to "
                                   "register (zero-copy needs it)")
            self._register(buf.data_ptr(), buf.numel() * buf.element_size(),
                           "LMCache's CPU buffer")
        # Headers: a registered area of 256 slots of HEADER_BYTES (puts and gets of a batch).
        self._hslots = 256
        self._headers = torch.zeros(self._hslots * HEADER_BYTES, dtype=torch.uint8)
        self._register(self._headers.data_ptr(), self._headers.numel(), "the header area")
        self._hlock = threading.Lock()
        self._put_pool = ThreadPoolExecutor(threads, thread_name_prefix="tierkv-lmcache-put")
        self._get_pool = ThreadPoolExecutor(1, thread_name_prefix="tierkv-lmcache-get")
        self._inflight = set()
        self._inflight_lock = threading.Lock()
        self._closed = False
        _log.info("tierkv LMCache backend: model %s, fingerprint %s, store %s", model,
                  self.fingerprint, source)

    def __str__(self):
        return "TierkvBackend"

    def _register(self, ptr, nbytes, what):
        rc = self.store.register_buffer(ptr, nbytes)
        if rc != 0:
            raise RuntimeError(f"tierkv: register_buffer of {what} ({nbytes} bytes) failed: "
                               f"{_tierkv.strerror(rc)}")
        self._registered.append(ptr)

    def _key(self, key):
        s = key.to_string() if hasattr(key, "to_string") else str(key)
        return self.prefix + s

    # ---- queries --------------------------------------------------------------------------

    def contains(self, key, pin=False):
        return self.store.is_exist(self._key(key)) == 1

    def batched_contains(self, keys, pin=False):
        """How many keys from the first are stored."""
        found = self.store.batch_is_exist([self._key(k) for k in keys])
        for i, f in enumerate(found):
            if f != 1:
                return i
        return len(keys)

    def exists_in_put_tasks(self, key):
        with self._inflight_lock:
            return self._key(key) in self._inflight

    # ---- puts -----------------------------------------------------------------------------

    def batched_submit_put_task(self, keys, objs, transfer_spec=None,
                                on_complete_callback=None):
        """Puts the memory objects in the background (a reference held on each until its put
        ended: LMCache drops its own once every backend has the objects); returns one Future
        per batch of up to 256 objects (True when all stored). ``on_complete_callback(key)``
        runs once per key whose put ended."""
        if not keys:
            return None
        full = [self._key(k) for k in keys]
        for o in objs:
            o.ref_count_up()
        with self._inflight_lock:
            self._inflight.update(full)
        futures = []
        for i in range(0, len(full), self._hslots):
            futures.append(self._put_pool.submit(
                self._put, full[i:i + self._hslots], objs[i:i + self._hslots],
                list(keys[i:i + self._hslots]), on_complete_callback))
        return futures

    def _put(self, keys, objs, lm_keys=(), on_complete=None):
        try:
            with self._hlock:  # the header area is one batch's at a time
                hkeys, hptrs, dptrs, dsizes = [], [], [], []
                for i, (k, o) in enumerate(zip(keys, objs)):
                    hdr, data_ptr, nbytes = self._header_of(o)
                    off = i * HEADER_BYTES
                    self._headers[off:off + HEADER_BYTES].copy_(
                        torch.frombuffer(bytearray(hdr), dtype=torch.uint8))
                    hkeys.append(k + _HEADER_SUFFIX)
                    hptrs.append(self._headers.data_ptr() + off)
                    dptrs.append(data_ptr)
                    dsizes.append(nbytes)
                # Header and data in one eviction group: evicted and removed together.
                cfg = _tierkv.ReplicateConfig()
                cfg.group_ids = list(keys) + list(keys)
                got = self.store.batch_put_from(list(keys) + hkeys, dptrs + hptrs,
                                                dsizes + [HEADER_BYTES] * len(hkeys), cfg)
            ok = [_common.is_stored(a) and _common.is_stored(b)
                  for a, b in zip(got[:len(keys)], got[len(keys):])]
            if not all(ok):
                first = next(rc for rc in got if not _common.is_stored(rc))
                _log.warning("tierkv: %d of %d LMCache puts failed (%s)", ok.count(False),
                             len(keys), _tierkv.strerror(first))
            return all(ok)
        finally:
            with self._inflight_lock:
                self._inflight.difference_update(keys)
            for o in objs:
                o.ref_count_down()
            if on_complete is not None:
                for k in lm_keys:
                    try:
                        on_complete(k)
                    except Exception as e:  # the engine's callback must not kill puts
                        _log.error("tierkv: LMCache put callback failed: %s", e)

    def _header_of(self, obj):
        """(header bytes, data address, data bytes) of a memory object: its tensors' shapes
        and dtypes (one or several groups) and its format."""
        shapes = _call_or(obj, "get_shapes", None)
        dtypes = _call_or(obj, "get_dtypes", None)
        if not shapes or not isinstance(shapes, (list, tuple)):
            shapes, dtypes = [obj.get_shape()], [obj.get_dtype()]
        fmt = _fmt_code(_call_or(obj, "get_memory_format", getattr(obj.metadata, "fmt", 0)))
        nbytes = int(obj.get_size())
        for d in dtypes:
            if _dtype_name(d) not in _DTYPE_BY_NAME:
                raise ValueError(f"memory object dtype {d} has no tierkv name")
        doc = json.dumps({"shapes": [list(x) for x in shapes],
                          "dtypes": [_dtype_name(d) for d in dtypes], "fmt": fmt,
                          "bytes": nbytes}, separators=(",", ":")).encode()
        if _HEAD.size + len(doc) > HEADER_BYTES:
            raise ValueError(f"memory object header of {len(doc)} bytes (at most "
                             f"{HEADER_BYTES - _HEAD.size})")
        hdr = _HEAD.pack(_MAGIC, 1, len(doc)) + doc
        ptr = obj.data_ptr() if callable(obj.data_ptr) else obj.data_ptr
        return hdr.ljust(HEADER_BYTES, b"\0"), int(ptr), nbytes

    # ---- gets -----------------------------------------------------------------------------

    def get_blocking(self, key):
        return self.batched_get_blocking([key])[0]

    def get_non_blocking(self, key):
        if not self.contains(key):
            return None
        return self._get_pool.submit(self.get_blocking, key)

    async def batched_get_non_blocking(self, lookup_id, keys, transfer_spec=None):
        """The memory objects of the longest stored prefix of ``keys`` (LMCache's
        asynchronous loading path); the reads run on a thread."""
        import asyncio
        objs = await asyncio.get_running_loop().run_in_executor(
            self._get_pool, self.batched_get_blocking, list(keys))
        out = []
        for o in objs:
            if o is None:
                break
            out.append(o)
        for o in objs[len(out):]:
            if o is not None:
                o.ref_count_down()
        return out

    async def batched_async_contains(self, lookup_id, keys, pin=False):
        return self.batched_contains(keys, pin)

    def submit_prefetch_task(self, key):
        """Nothing to prefetch into: tierkv's gets land in LMCache's CPU buffer directly."""
        return False

    def batched_get_blocking(self, keys):
        """Memory objects read zero-copy into LMCache's CPU buffer (None for a key not
        stored, unreadable, or whose object cannot be allocated)."""
        if not keys:
            return []
        out = []
        for i in range(0, len(keys), self._hslots):
            out.extend(self._get_batch([self._key(k) for k in keys[i:i + self._hslots]]))
        return out

    def _get_batch(self, full):
        """Headers first (each a HEADER_BYTES object beside its data), then each object's
        data straight into a memory object allocated from LMCache's CPU backend."""
        if self.local_cpu_backend is None and self.memory_allocator is None:
            raise RuntimeError("tierkv: no LMCache CPU backend to allocate memory objects in")
        with self._hlock:
            base = self._headers.data_ptr()
            got = self.store.batch_get_into([k + _HEADER_SUFFIX for k in full],
                                            [base + i * HEADER_BYTES for i in range(len(full))],
                                            [HEADER_BYTES] * len(full))
            headers = [bytes(self._headers[i * HEADER_BYTES:(i + 1) * HEADER_BYTES].numpy())
                       if g == HEADER_BYTES else None for i, g in enumerate(got)]
        objs, reads = [None] * len(full), []
        for i, h in enumerate(headers):
            if h is None:
                continue
            doc = _parse_header(h)
            if doc is None:
                _log.error("tierkv: %s has no valid LMCache object header", full[i])
                continue
            obj = self._allocate(doc)
            if obj is None:
                continue
            if int(obj.get_size()) != doc["bytes"]:
                obj.ref_count_down()
                continue
            objs[i] = obj
            reads.append(i)
        if reads:
            ptrs = [objs[i].data_ptr() if callable(objs[i].data_ptr) else objs[i].data_ptr
                    for i in reads]
            sizes = [int(objs[i].get_size()) for i in reads]
            got = self.store.batch_get_into([full[i] for i in reads], ptrs, sizes)
            for i, g, n in zip(reads, got, sizes):
                if g != n:
                    objs[i].ref_count_down()
                    objs[i] = None
        return objs

    def _allocate(self, doc):
        shapes = [torch.Size(x) for x in doc["shapes"]]
        dtypes = [_DTYPE_BY_NAME[d] for d in doc["dtypes"]]
        fmt = doc["fmt"]
        try:
            from lmcache.v1.memory_management import MemoryFormat
            fmt = MemoryFormat(fmt)
        except Exception:  # no LMCache, or a format this LMCache does not know
            pass
        shape_arg = shapes if len(shapes) > 1 else shapes[0]
        dtype_arg = dtypes if len(dtypes) > 1 else dtypes[0]
        owner = self.local_cpu_backend or self.memory_allocator
        return owner.allocate(shape_arg, dtype_arg, fmt)

    # ---- the rest -------------------------------------------------------------------------

    def pin(self, key):
        return self.contains(key)

    def unpin(self, key):
        return self.contains(key)

    def remove(self, key, force=True):
        k = self._key(key)
        self.store.remove(k + _HEADER_SUFFIX, bool(force))
        return self.store.remove(k, bool(force)) == 0

    def get_allocator_backend(self):
        return self.local_cpu_backend

    def close(self):
        if self._closed:
            return
        self._closed = True
        self._put_pool.shutdown(wait=True)
        self._get_pool.shutdown(wait=True)
        for ptr in self._registered:
            self.store.unregister_buffer(ptr)
        _common.release_store(self.store)
