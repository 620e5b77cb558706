"""DistributedStore's methods in every mode (embedded, standalone requester, embedded with a
remote master): results, return conventions, and mixed good and bad keys in every batch."""

import os
import threading

import numpy as np
import pytest

import tierkv
from tierkv import ErrorCode as E

GUARD = 4096


def pattern(n, seed):
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


def guarded(n):
    """A registered-size destination followed by guard bytes that must stay 0xEE."""
    buf = np.full(n + GUARD, 0xEE, dtype=np.uint8)
    return buf


def guard_ok(buf, n):
    return bool((buf[n:] == 0xEE).all())


# ---- bytes through the local buffer ---------------------------------------------------------


def test_put_get_and_missing(store, key):
    assert store.put(key("a"), b"hello") == 0
    assert store.get(key("a")) == b"hello"
    assert store.get(key("missing")) == b""
    # Mooncake's put semantics: a re-put succeeds and the first writer's bytes stay.
    assert store.put(key("a"), b"again") == 0
    assert store.get(key("a")) == b"hello"
    assert store.is_exist(key("a")) == 1
    assert store.is_exist(key("missing")) == 0
    assert store.is_exist("") == E.INVALID_KEY
    assert store.get_size(key("a")) == 5
    assert store.get_size(key("missing")) == E.OBJECT_NOT_FOUND


def test_put_parts_and_value_kinds(store, key):
    assert store.put_parts(key("p"), b"ab", bytearray(b"cd"), memoryview(b"ef"),
                           np.frombuffer(b"gh", dtype=np.uint8)) == 0
    assert store.get(key("p")) == b"abcdefgh"
    cfg = tierkv.ReplicateConfig()
    assert store.put_parts(key("q"), b"x", config=cfg) == 0
    assert store.put(key("empty"), b"") == E.INVALID_PARAMS  # objects are never empty
    with pytest.raises(TypeError):
        store.put(key("int"), 5)


def test_put_batch_get_batch_mixed(store, key):
    keys = [key("b0"), "", key("b2"), key("b2")]
    rc = store.put_batch(keys, [b"v0", b"v1", b"v2", b"v3"])
    assert rc == E.INVALID_KEY  # the first failing key's code; the good keys are stored
    assert store.get_batch([key("b0"), key("b2"), key("nope"), ""]) == [b"v0", b"v2", b"", b""]
    assert store.put_batch([key("c")], [b"1", b"2"]) == E.INVALID_PARAMS  # lengths differ


def test_get_buffer(store, key):
    value = pattern(100_000, 1)
    assert store.put(key("g"), value) == 0
    h = store.get_buffer(key("g"))
    assert h is not None and h.size() == len(value) == len(h) == h.len()
    assert h.ptr() != 0
    assert np.array_equal(np.asarray(h), value)
    assert bytes(memoryview(h)) == value.tobytes()
    assert store.get_buffer(key("missing")) is None
    hs = store.batch_get_buffer([key("g"), key("missing"), ""])
    assert hs[0] is not None and bytes(hs[0]) == value.tobytes()
    assert hs[1] is None and hs[2] is None


def test_upsert_family(store, key):
    assert store.upsert(key("u"), b"one") == 0  # missing key: a plain put
    assert store.upsert(key("u"), b"second value") == 0
    assert store.get(key("u")) == b"second value"
    assert store.upsert_parts(key("u"), b"3", b"rd") == 0
    assert store.get(key("u")) == b"3rd"
    assert store.upsert_batch([key("u"), key("v"), ""], [b"4", b"v", b"x"]) == E.INVALID_KEY
    assert store.get_batch([key("u"), key("v")]) == [b"4", b"v"]


# ---- zero-copy ------------------------------------------------------------------------------


def test_zero_copy_round_trip_with_guards(store, key):
    n = 300_000
    src = pattern(n, 2)
    dst = guarded(n)
    assert store.register_buffer(src.ctypes.data, n) == 0
    assert store.register_buffer(dst.ctypes.data, n) == 0  # the guard is not registered
    assert store.put_from(key("z"), src.ctypes.data, n) == 0
    assert store.get_into(key("z"), dst.ctypes.data, n) == n
    assert np.array_equal(dst[:n], src) and guard_ok(dst, n)
    # Too small a destination: an error and nothing written.
    dst[:] = 0xEE
    assert store.get_into(key("z"), dst.ctypes.data, n - 1) == E.BUFFER_OVERFLOW
    assert (dst == 0xEE).all()
    # Past the registered range (into the guard): refused, nothing written.
    assert store.get_into(key("z"), dst.ctypes.data + 1, n) == E.BUFFER_NOT_REGISTERED
    assert (dst == 0xEE).all()
    assert store.get_into(key("missing"), dst.ctypes.data, n) == E.OBJECT_NOT_FOUND
    assert store.unregister_buffer(dst.ctypes.data) == 0
    assert store.unregister_buffer(dst.ctypes.data) == E.INVALID_PARAMS
    assert store.get_into(key("z"), dst.ctypes.data, n) == E.BUFFER_NOT_REGISTERED
    assert store.unregister_buffer(src.ctypes.data) == 0


def test_batch_put_from_and_get_into_mixed(store, key):
    n = 4096
    src = pattern(4 * n, 3)
    dst = guarded(4 * n)
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert store.register_buffer(dst.ctypes.data, 4 * n) == 0
    unregistered = np.zeros(n, dtype=np.uint8)
    base = src.ctypes.data
    keys = [key("0"), "", key("2"), key("3")]
    codes = store.batch_put_from(keys, [base, base + n, unregistered.ctypes.data, base + 3 * n],
                                 [n, n, n, n])
    assert codes == [0, E.INVALID_KEY, E.BUFFER_NOT_REGISTERED, 0]
    d = dst.ctypes.data
    got = store.batch_get_into([key("0"), key("2"), key("3"), key("0")],
                               [d, d + n, d + 2 * n, d + 3 * n], [n, n, n - 1, n])
    assert got == [n, E.OBJECT_NOT_FOUND, E.BUFFER_OVERFLOW, E.DUPLICATE_KEY]
    assert np.array_equal(dst[:n], src[:n]) and guard_ok(dst, 4 * n)
    assert store.batch_get_into([key("0"), key("3")], [d], [n]) == [E.INVALID_PARAMS] * 2
    assert store.batch_upsert_from([key("0"), ""], [base + 3 * n, base], [n, n]) == \
        [0, E.INVALID_KEY]
    assert store.get_into(key("0"), d, n) == n
    assert np.array_equal(dst[:n], src[3 * n:4 * n])
    assert store.upsert_from(key("0"), base, n) == 0
    assert store.get_into(key("0"), d, n) == n
    assert np.array_equal(dst[:n], src[:n])


def test_multi_buffers_mixed(store, key):
    piece = 64 * 1024
    src = pattern(8 * piece, 4)
    dst = guarded(8 * piece)
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert store.register_buffer(dst.ctypes.data, 8 * piece) == 0
    s, d = src.ctypes.data, dst.ctypes.data
    keys = [key("m0"), key("m1"), "", key("m3")]
    ptrs = [[s, s + piece], [s + 2 * piece, s + 3 * piece], [s], [s + 4 * piece]]
    sizes = [[piece, piece], [piece, piece], [piece], [piece, piece]]  # m3: lengths differ
    assert store.batch_put_from_multi_buffers(keys, ptrs, sizes) == \
        [0, 0, E.INVALID_KEY, E.INVALID_PARAMS]
    out = store.batch_get_into_multi_buffers(
        [key("m0"), key("m1"), key("missing")],
        [[d + piece, d], [d + 2 * piece, d + 3 * piece], [d + 4 * piece]],
        [[piece, piece], [piece, piece - 1], [piece]])
    assert out == [2 * piece, E.BUFFER_OVERFLOW, E.OBJECT_NOT_FOUND]
    assert np.array_equal(dst[piece:2 * piece], src[:piece])  # scattered in the order given
    assert np.array_equal(dst[:piece], src[piece:2 * piece])
    assert guard_ok(dst, 8 * piece)
    assert store.batch_upsert_from_multi_buffers([key("m0")], [[s + 5 * piece]], [[piece]]) == [0]
    assert store.batch_get_into_multi_buffers([key("m0")], [[d]], [[piece]]) == [piece]
    assert store.batch_get_into_multi_buffers([key("m0")], [[d]], [[piece]], True) == [piece]
    # Top-level lists of other lengths than keys: every key fails.
    assert store.batch_put_from_multi_buffers([key("x"), key("y")], [[s]], [[piece]]) == \
        [E.INVALID_PARAMS] * 2


def test_get_into_ranges(store, key):
    a = np.arange(64, dtype=np.uint8)
    b = (np.arange(64, dtype=np.uint8) + 100).astype(np.uint8)
    assert store.put(key("r1"), a) == 0
    assert store.put(key("r2"), b) == 0
    buf0 = np.zeros(32 + GUARD, dtype=np.uint8)
    buf1 = np.zeros(32, dtype=np.uint8)
    assert store.register_buffer(buf0.ctypes.data, 32) == 0
    assert store.register_buffer(buf1.ctypes.data, 32) == 0
    r = store.get_into_ranges(
        [buf0.ctypes.data, buf1.ctypes.data],
        [[key("r1"), key("r2"), key("missing")], [key("r2"), key("r1")]],
        [[[0, 20], [8], [0]], [[4], [20]]],
        [[[1, 30], [2], [0]], [[0], [62]]],
        [[[4, 3], [5], [1]], [[6], [4]]])
    assert r == [[[4, 3], [5], [E.OBJECT_NOT_FOUND]], [[6], [E.INVALID_READ]]]
    assert list(buf0[0:4]) == list(a[1:5]) and list(buf0[20:23]) == list(a[30:33])
    assert list(buf0[8:13]) == list(b[2:7]) and list(buf1[4:10]) == list(b[0:6])
    assert (buf1[20:24] == 0).all()  # the fragment past r1's end wrote nothing
    # Past the registered destination: BUFFER_OVERFLOW, nothing written past it.
    r = store.get_into_ranges([buf0.ctypes.data], [[key("r1")]], [[[30]]], [[[0]]], [[[4]]])
    assert r == [[[E.BUFFER_OVERFLOW]]]
    assert (buf0[32:] == 0).all()
    # Mismatched fragment lists: INVALID_PARAMS for that key only.
    r = store.get_into_ranges([buf0.ctypes.data], [[key("r1"), key("r2")]],
                              [[[0, 1], [4]]], [[[0], [0]]], [[[1, 1], [1]]])
    assert r[0][0] == [E.INVALID_PARAMS, E.INVALID_PARAMS] and r[0][1] == [1]
    # An empty size list against offsets: one error per destination, not [] (as Mooncake).
    r = store.get_into_ranges([buf0.ctypes.data], [[key("r1")]], [[[0, 1]]], [[[0, 0]]], [[[]]])
    assert r == [[[E.INVALID_PARAMS, E.INVALID_PARAMS]]]


# ---- query, removal, replicas ---------------------------------------------------------------


def test_exist_remove_regex_all(store, key):
    for k in ["s1", "s2", "other"]:
        assert store.put(key(k), b"x") == 0
    assert store.batch_is_exist([key("s1"), key("other"), key("nope"), ""]) == \
        [1, 1, 0, E.INVALID_KEY]
    # is_exist leased them: removal waits unless forced.
    assert store.remove(key("other")) == E.OBJECT_HAS_LEASE
    assert store.remove(key("other"), force=True) == 0
    assert store.remove(key("other"), True) == E.OBJECT_NOT_FOUND
    assert store.batch_remove([key("s1"), key("nope"), ""], force=True) == \
        [0, E.OBJECT_NOT_FOUND, E.INVALID_KEY]
    assert store.remove_by_regex("^" + key("s") + "[0-9]$", force=True) == 1
    assert store.remove_by_regex("([") == E.INVALID_PARAMS
    assert store.put(key("last"), b"y") == 0
    assert store.remove_all(force=True) >= 1
    assert store.is_exist(key("last")) == 0


def test_batch_is_exist_reads_keys_another_thread_replaces(store, key):
    # The keys are read as views of the str objects while the GIL is released: the binding
    # holds them, so another thread replacing the list's items (dropping the last reference of
    # the old strs) cannot change the keys a call looks up.
    assert store.put(key("kept-é"), b"1") == 0
    keys = [key("kept-é")] + ["".join(["gone-", str(i)]) for i in range(1023)]
    stop = threading.Event()

    def replace():
        n = 0
        while not stop.is_set():
            n += 1
            for i in range(1, len(keys)):
                keys[i] = "".join(["other-", str(n), "-", str(i)])

    t = threading.Thread(target=replace)
    t.start()
    try:
        for _ in range(200):
            got = store.batch_is_exist(keys)
            assert len(got) == 1024 and got[0] == 1 and set(got[1:]) <= {0}
    finally:
        stop.set()
        t.join()


def test_batch_is_exist_reuses_its_key_vector_safely(store, key):
    # batch_is_exist keeps its converted keys per thread between calls: batches that shrink,
    # grow, fail half-way or come as tuples must each be answered on their own keys only.
    long_key = key("long-" + "x" * 200)
    assert store.put(key("a"), b"1") == 0 and store.put(long_key, b"2") == 0
    assert store.batch_is_exist([long_key, key("b"), key("a")]) == [1, 0, 1]
    assert store.batch_is_exist([key("b")]) == [0]
    assert store.batch_is_exist((key("a"), long_key)) == [1, 1]
    with pytest.raises(TypeError, match=r"keys\[1\] must be a str"):
        store.batch_is_exist([key("a"), 7, key("b")])
    assert store.batch_is_exist([]) == []
    assert store.batch_is_exist([key("b"), key("b"), key("a"), key("c")]) == [0, 0, 1, 0]
    with pytest.raises(TypeError):
        store.batch_is_exist(key("a"))  # a str is not a list of keys
    results = {}

    def worker(t):
        mine = [key("a") if i % 2 else key(f"none-{t}-{i}") for i in range(t + 1)]
        results[t] = [store.batch_is_exist(mine) for _ in range(50)]

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for t, answers in results.items():
        assert all(a == [i % 2 for i in range(t + 1)] for a in answers), t


def test_replica_descriptors(store, key):
    assert store.put(key("d"), b"12345") == 0
    descs = store.get_replica_desc(key("d"))
    assert len(descs) == 1
    d = descs[0]
    assert d.is_memory_replica() and not d.is_disk_replica() and not d.is_local_disk_replica()
    assert d.status == tierkv.ReplicaStatus.COMPLETE and d.size == 5
    assert store.get_replica_desc(key("missing")) == []
    m = store.batch_get_replica_desc([key("d"), key("missing")])
    assert list(m.keys()) == [key("d")] and m[key("d")][0].is_memory_replica()


def test_replicate_config_on_puts(store, key):
    cfg = tierkv.ReplicateConfig()
    cfg.group_ids = ["g-" + key("1"), ""]
    cfg.with_hard_pin = True
    assert store.put_batch([key("1"), key("2")], [b"a", b"b"], cfg) == 0
    cfg.group_ids = ["only-one"]
    assert store.put_batch([key("3"), key("4")], [b"a", b"b"], cfg) == E.INVALID_PARAMS
    bad = tierkv.ReplicateConfig()
    bad.soft_pin_action = tierkv.SoftPinAction.ENABLE
    bad.soft_pin_ttl_ms = 5000  # a soft pin that lapses 5 s after the put
    assert store.put(key("5"), b"x", bad) == 0
    bad.soft_pin_ttl_ms = 400 * 24 * 3600 * 1000  # over a year
    assert store.put(key("5b"), b"x", bad) == E.INVALID_PARAMS
    bad.soft_pin_ttl_ms = 0  # 0: ordinary cache, as in Mooncake
    assert store.put(key("5c"), b"x", bad) == 0
    two = tierkv.ReplicateConfig()
    two.preferred_segments = ["a", "b"]
    assert store.put(key("6"), b"x", two) == E.INVALID_PARAMS
    same_node = tierkv.ReplicateConfig()
    same_node.prefer_alloc_in_same_node = True
    assert store.put(key("7"), b"x", same_node) == 0
    same_node.replica_num = 2
    assert store.put(key("8"), b"x", same_node) == E.INVALID_PARAMS


def test_replicate_config_parent_keys(store, key):
    # The reuse policy's optional hint: one parent key per key of the call, or none.
    cfg = tierkv.ReplicateConfig()
    assert cfg.parent_keys == []
    cfg.parent_keys = ["", key("p1")]
    assert 'parent_keys=["", "' + key("p1") + '"]' in str(cfg)
    assert store.put_batch([key("p1"), key("p2")], [b"a", b"bb"], cfg) == 0
    assert store.get(key("p2")) == b"bb"
    cfg.parent_keys = [key("p1")]
    assert store.put_batch([key("p3"), key("p4")], [b"a", b"b"], cfg) == E.INVALID_PARAMS
    assert store.is_exist(key("p3")) == 0 and store.is_exist(key("p4")) == 0


def test_health_hostname_close(mode, request):
    from conftest import make_store

    c = request.getfixturevalue("cluster") if mode != "embedded" else None
    s = make_store(mode, c)
    assert s.health_check() == 0
    # The own segment's name ("localhost:<pid>:<n>") when the store contributes one, else the
    # local_hostname given to setup.
    if mode == "standalone":
        assert s.get_hostname() == "localhost"
    elif mode == "embedded_remote":  # Mooncake's form, "<host>:<port>" of its data port
        host, port = s.get_hostname().split(":")
        assert host == "localhost" and 12300 <= int(port) <= 14300
    else:
        host, pid, n = s.get_hostname().split(":")
        assert host == "localhost" and int(pid) == os.getpid() and int(n) >= 0
    assert s.close() == 0
    assert s.close() == 0
    assert s.health_check() == 1
    assert s.put("k", b"v") == E.INVALID_PARAMS
    assert s.get("k") == b""
    assert s.get_buffer("k") is None
    assert s.batch_is_exist(["a", "b"]) == [E.INVALID_PARAMS] * 2
