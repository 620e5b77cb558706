"""Mooncake's Python conventions on tierkv (embedded mode; the deployment with a remote master
is test_mooncake_deploy.py): re-puts succeed, soft pins with a TTL, get_hostname() as a
preferred segment."""

import time

import numpy as np

import tierkv

MiB = 1 << 20


def embedded(segment=16 * MiB, **extra):
    s = tierkv.MooncakeDistributedStore()
    config = {"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
              "global_segment_size": segment, "local_buffer_size": 16 * MiB,
              "protocol": "tcp", "master_server_addr": ""}
    config.update(extra)
    assert s.setup(config) == 0, s.last_error()
    return s


def test_every_put_call_treats_an_existing_key_as_done():
    s = embedded()
    buf = np.arange(4096, dtype=np.uint8)
    other = np.full(4096, 7, dtype=np.uint8)
    assert s.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    assert s.register_buffer(other.ctypes.data, other.nbytes) == 0
    assert s.put("k1", b"first") == 0
    assert s.put("k1", b"second") == 0
    assert s.put_batch(["k1", "k2"], [b"x", b"y"]) == 0
    assert s.put_parts("k2", b"a", b"b") == 0
    assert s.put_from("k3", buf.ctypes.data, 4096) == 0
    assert s.put_from("k3", other.ctypes.data, 4096) == 0
    assert s.batch_put_from(["k3", "k4"], [other.ctypes.data] * 2, [4096] * 2) == [0, 0]
    assert s.batch_put_from_multi_buffers(["k3", "k4"], [[buf.ctypes.data]] * 2,
                                          [[4096]] * 2) == [0, 0]
    # The first writer's bytes stay (objects are immutable; upsert replaces them).
    assert s.get("k1") == b"first"
    assert s.get("k2") == b"y"
    out = np.zeros(4096, dtype=np.uint8)
    assert s.register_buffer(out.ctypes.data, out.nbytes) == 0
    assert s.get_into("k3", out.ctypes.data, 4096) == 4096
    assert (out == buf).all()
    assert s.upsert("k1", b"third") == 0 and s.get("k1") == b"third"
    s.close()


def test_soft_pin_ttl_lapses_and_a_pin_without_ttl_holds():
    # Short leases: is_exist and get lease an object, and a leased object is never evicted.
    s = embedded(default_kv_lease_ttl_ms=50)
    value = b"v" * MiB
    lapsing = tierkv.ReplicateConfig()
    lapsing.soft_pin_action = tierkv.SoftPinAction.ENABLE
    lapsing.soft_pin_ttl_ms = 1500
    holding = tierkv.ReplicateConfig()
    holding.with_soft_pin = True  # no TTL: the master's default (0 = until removed)
    assert s.put("lapsing", value, lapsing) == 0
    assert s.put("holding", value, holding) == 0
    # Three times the segment of unpinned objects: eviction takes only unpinned ones.
    for i in range(48):
        assert s.put(f"a{i}", value) == 0
    time.sleep(0.1)
    assert s.is_exist("lapsing") == 1 and s.is_exist("holding") == 1
    assert sum(s.is_exist(f"a{i}") for i in range(48)) < 16
    time.sleep(1.6)  # the lapsing pin has run out; "lapsing" is the least recently used object
    for i in range(48):
        assert s.put(f"b{i}", value) == 0
    time.sleep(0.1)
    assert s.is_exist("lapsing") == 0
    assert s.is_exist("holding") == 1
    s.close()


def test_replica_descriptors_as_mooncake_shapes_them():
    s = embedded()
    assert s.put("d", b"x" * 1000) == 0
    (d,) = s.get_replica_desc("d")
    assert d.status == tierkv.ReplicaStatus.COMPLETE and int(d.status) == 3
    assert d.type == tierkv.ReplicaType.MEMORY and d.is_memory_replica()
    buf = d.get_memory_descriptor().buffer_descriptor
    assert buf.size_ == 1000 and buf.transport_endpoint_.split("@")[0] == s.get_hostname()
    assert buf.buffer_address_ == d.offset
    import pytest

    with pytest.raises(RuntimeError, match="Expected DiskDescriptor"):
        d.get_disk_descriptor()
    assert [v.name for v in tierkv.ReplicaStatus.__members__.values()] == [
        "UNDEFINED", "INITIALIZED", "PROCESSING", "COMPLETE", "REMOVED", "FAILED"]
    s.close()


def test_batch_replica_clear_skips_leased_and_fresh_objects_and_names_segments():
    s = embedded(default_kv_lease_ttl_ms=300)
    assert s.batch_replica_clear([]) == []
    for k in ("c1", "c2", "c3", "c4"):
        assert s.put(k, b"v" * 100) == 0
    # Fresh puts count as leased for one TTL (Mooncake's test_clear_with_active_lease).
    assert s.batch_replica_clear(["c1", "c2"]) == []
    time.sleep(0.4)
    assert s.get("c3") == b"v" * 100  # a read leases c3 again
    assert s.batch_replica_clear(["c1", "c3", "missing"]) == ["c1"]
    assert s.is_exist("c1") == 0 and s.get("c1") == b""
    # A segment that holds no replica clears nothing; the own segment's name does.
    assert s.batch_replica_clear(["c2"], segment_name="nohost:1") == []
    assert s.is_exist("c2") == 1
    time.sleep(0.4)
    assert s.batch_replica_clear(["c2", "c4"], segment_name=s.get_hostname()) == ["c2", "c4"]
    assert s.is_exist("c2") == 0 and s.is_exist("c4") == 0
    s.close()


def test_layer_wise_sessions_read_ranges_byte_exact_without_the_master():
    s = embedded(segment=32 * MiB)
    layers, layer_bytes = 8, 4096
    keys = [f"sess-{i}" for i in range(3)]
    values = [np.random.default_rng(i).integers(0, 256, layers * layer_bytes, dtype=np.uint8)
              for i in range(3)]
    for k, v in zip(keys, values):
        assert s.put(k, v.tobytes()) == 0
    codes, sources = s.batch_get_session_start_with_sources(keys + ["absent"])
    assert codes == [0, 0, 0, int(tierkv.ErrorCode.OBJECT_NOT_FOUND)]
    assert sources == ["memory"] * 3 + [None]
    # The session holds the bytes: removing the objects now changes nothing for it.
    assert s.batch_remove(keys, True) == [0, 0, 0]
    dst = np.zeros((3, layers * layer_bytes), dtype=np.uint8)
    assert s.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    row = dst.strides[0]
    for layer in range(layers):  # one call per layer, as SGLang's direct linker does
        off = layer * layer_bytes
        res = s.batch_get_into_multi_buffer_ranges(
            keys, [[dst.ctypes.data + i * row + off] for i in range(3)],
            [[layer_bytes]] * 3, [[off]] * 3)
        assert res == [layer_bytes] * 3
    for i in range(3):
        assert (dst[i] == values[i]).all()
    # Errors: a range past the end, an unregistered destination, a key without a session.
    scratch = np.zeros(layer_bytes, dtype=np.uint8)
    bad = s.batch_get_into_multi_buffer_ranges(
        keys + ["absent"],
        [[dst.ctypes.data]] * 2 + [[scratch.ctypes.data]] + [[dst.ctypes.data]],
        [[layer_bytes], [2]] + [[layer_bytes]] * 2,
        [[0], [layers * layer_bytes - 1], [0], [0]])
    assert bad == [layer_bytes, int(tierkv.ErrorCode.INVALID_PARAMS),
                   int(tierkv.ErrorCode.BUFFER_NOT_REGISTERED),
                   int(tierkv.ErrorCode.INVALID_PARAMS)]
    assert s.batch_get_session_end(keys) == 0
    assert s.batch_get_into_multi_buffer_ranges(
        keys[:1], [[dst.ctypes.data]], [[1]], [[0]]) == [int(tierkv.ErrorCode.INVALID_PARAMS)]
    s.close()
