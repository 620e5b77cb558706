"""tierkv.integrations.lmcache.TierkvBackend through the LMCache test double
(tests/python/doubles/lmcache: its config, storage-plugin launcher, LocalCPUBackend with its
allocator, memory objects and keys): loaded by configuration alone, memory objects stored
and read back zero-copy (full and partial chunks, several tensor groups), the put callback
and the references held while a put runs, the asynchronous lookup and load calls, removal,
the layout fingerprint, the older positional constructor, strict options."""

import asyncio
import uuid

import pytest
import torch

from engine_util import STORE_CONF, HeldStore

from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend import CreateStorageBackends
from lmcache.v1.storage_backend.abstract_backend import StorageBackendInterface

CHUNK = 16
SHAPE = (2, 2, CHUNK, 16)  # KV_2LTD: [2, layers, tokens, hidden]


def _config(**extra):
    e = {"storage_plugin.tierkv.module_path": "tierkv.integrations.lmcache",
         "storage_plugin.tierkv.class_name": "TierkvBackend",
         "tierkv.store": dict(STORE_CONF), "tierkv.cache_prefix": f"l{uuid.uuid4().hex[:8]}"}
    e.update(extra)
    return LMCacheEngineConfig.from_defaults(chunk_size=CHUNK, max_local_cpu_size=0.05,
                                             storage_plugins=["tierkv"], extra_config=e)


def _metadata(dtype=torch.bfloat16, kv_shape=(2, 2, CHUNK, 2, 8)):
    return LMCacheMetadata(model_name="org/model", world_size=1, local_world_size=1,
                           worker_id=0, local_worker_id=0, kv_dtype=dtype, kv_shape=kv_shape,
                           chunk_size=CHUNK)


def _backends(config, metadata):
    loop = asyncio.new_event_loop()
    b = CreateStorageBackends(config, metadata, loop)
    return b["tierkv"], b["LocalCPUBackend"], loop


def _key(h, dtype=torch.bfloat16):
    return CacheEngineKey("org/model", 1, 0, h, dtype)


def _objects(cpu, n, seed, tokens=CHUNK, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        o = cpu.allocate(torch.Size((2, 2, tokens, 16)), dtype, MemoryFormat.KV_2LTD)
        o.tensor.copy_(torch.randn(2, 2, tokens, 16, generator=g).to(dtype))
        out.append(o)
    return out


def test_loaded_as_a_storage_plugin_and_objects_round_trip_zero_copy():
    with HeldStore():
        config, md = _config(), _metadata()
        tk, cpu, _ = _backends(config, md)
        assert isinstance(tk, StorageBackendInterface) and type(tk).__name__ == "TierkvBackend"
        objs = _objects(cpu, 3, 1) + _objects(cpu, 1, 2, tokens=5)  # a partial last chunk
        keys = [_key(0x1000 + i) for i in range(4)]
        done = []
        futs = tk.batched_submit_put_task(keys, objs, on_complete_callback=done.append)
        assert all(f.result(30) for f in futs)
        assert done == keys
        assert [o.get_ref_count() for o in objs] == [1] * 4  # the put's reference is gone
        assert tk.contains(keys[0]) and tk.batched_contains(keys + [_key(7)]) == 4
        # Another engine process's view: a fresh CPU backend reads them.
        tk2, cpu2, loop = _backends(config, md)
        got = tk2.batched_get_blocking(keys + [_key(7)])
        assert got[4] is None
        for o, g in zip(objs, got):
            assert g.get_shape() == o.get_shape() and torch.equal(g.tensor, o.tensor)
            assert cpu2.memory_allocator.pin_allocator.buffer.data_ptr() <= g.data_ptr
        single = tk2.get_blocking(keys[3])
        assert torch.equal(single.tensor, objs[3].tensor)
        # LMCache's asynchronous path: lookups and loads as coroutines.
        assert loop.run_until_complete(tk2.batched_async_contains("l1", keys + [_key(7)])) == 4
        prefix = loop.run_until_complete(tk2.batched_get_non_blocking(
            "l1", [keys[0], _key(8), keys[1]]))
        assert len(prefix) == 1 and torch.equal(prefix[0].tensor, objs[0].tensor)
        assert tk2.remove(keys[1]) and not tk2.contains(keys[1])
        assert tk2.get_blocking(keys[1]) is None
        for b in (tk, tk2):
            b.close()


def test_objects_of_several_tensor_groups_keep_their_shapes():
    with HeldStore():
        config, md = _config(), _metadata()
        tk, cpu, _ = _backends(config, md)
        shapes = [torch.Size((2, 2, CHUNK, 16)), torch.Size((1, 3, CHUNK, 8))]
        obj = cpu.allocate(shapes, [torch.bfloat16, torch.float32], MemoryFormat.KV_2LTD)
        n = obj.get_size()
        flat = torch.arange(n, dtype=torch.int32).to(torch.uint8)
        obj.raw_data[:n].copy_(flat)
        assert all(f.result(30) for f in tk.batched_submit_put_task([_key(42)], [obj]))
        tk2, _cpu2, _ = _backends(config, md)
        got = tk2.get_blocking(_key(42))
        assert got.get_shapes() == shapes and got.get_dtypes() == [torch.bfloat16,
                                                                  torch.float32]
        assert torch.equal(got.raw_data[:n], flat)
        for b in (tk, tk2):
            b.close()


@pytest.mark.parametrize("change", ["kv_dtype", "kv_shape"])
def test_another_layout_never_reads_these_objects(change):
    with HeldStore():
        config = _config()
        tk, cpu, _ = _backends(config, _metadata())
        assert all(f.result(30) for f in tk.batched_submit_put_task([_key(5)],
                                                                    _objects(cpu, 1, 3)))
        md = _metadata(torch.float16) if change == "kv_dtype" else \
            _metadata(kv_shape=(2, 2, CHUNK, 4, 4))
        other, _, _ = _backends(config, md)
        assert other.fingerprint != tk.fingerprint
        assert not other.contains(_key(5)) and other.get_blocking(_key(5)) is None
        for b in (tk, other):
            b.close()


def test_older_positional_constructor_and_strict_options():
    from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

    from tierkv.integrations.lmcache import TierkvBackend
    with HeldStore():
        config, md = _config(), _metadata()
        cpu = LocalCPUBackend(config, md, "cpu", None)
        old = TierkvBackend(config, md, None, cpu.memory_allocator, cpu, "cpu", None)
        assert not old.contains(_key(1))
        old.close()
        with pytest.raises(ValueError, match="tierkv.typo"):
            TierkvBackend(config=_config(**{"tierkv.typo": 1}), metadata=md,
                          local_cpu_backend=cpu, dst_device="cpu")
        # LMCache's scheduler side has no CPU backend: queries only.
        sched = TierkvBackend(config=config, metadata=md, local_cpu_backend=None)
        assert sched.batched_contains([_key(1)]) == 0
        sched.close()
