"""The GIL is released while the store works; many threads share one store; readers racing
upserts never see a mix of versions."""

import threading
import time

import numpy as np

import tierkv

OBJ = 2 << 20


def test_gil_is_released_during_a_large_get(key):
    s = tierkv.DistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", 320 << 20, 1 << 20, "tcp", "", "") == 0
    count = 64
    src = np.random.default_rng(0).integers(0, 256, count * OBJ, dtype=np.uint8)
    dst = np.zeros_like(src)
    assert s.register_buffer(src) == 0 and s.register_buffer(dst) == 0
    keys = [key(str(i)) for i in range(count)]
    ptrs = [[src.ctypes.data + i * OBJ] for i in range(count)]
    sizes = [[OBJ]] * count
    assert s.batch_put_from_multi_buffers(keys, ptrs, sizes) == [0] * count
    dptrs = [[dst.ctypes.data + i * OBJ] for i in range(count)]
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())

    t = threading.Thread(target=ticker)
    t.start()
    time.sleep(0.05)
    inside = []
    for _ in range(3):  # a few gets, in case the scheduler hides one
        begin = time.perf_counter()
        assert s.batch_get_into_multi_buffers(keys, dptrs, sizes) == [OBJ] * count
        end = time.perf_counter()
        inside.append(sum(1 for x in ticks if begin < x < end))
    stop.set()
    t.join()
    assert np.array_equal(src, dst)
    # With the GIL held for the whole call the ticker could not run at all inside it.
    assert max(inside) > 100, inside
    s.close()


def test_many_threads_share_one_store(store, key):
    errors = []

    def worker(t):
        try:
            rng = np.random.default_rng(t)
            src = rng.integers(0, 256, 64 << 10, dtype=np.uint8)
            dst = np.zeros_like(src)
            assert store.register_buffer(src) == 0 and store.register_buffer(dst) == 0
            for i in range(40):
                k = key(f"{t}-{i}")
                n = 1024 + i * 1000
                if i % 2:
                    assert store.put_from(k, src, n) == 0
                    assert store.get_into(k, dst, n) == n
                    assert np.array_equal(src[:n], dst[:n])
                else:
                    assert store.put(k, src[:n]) == 0
                    assert store.get(k) == src[:n].tobytes()
                assert store.batch_is_exist([k, key("absent")]) == [1, 0]
            assert store.unregister_buffer(src) == 0 and store.unregister_buffer(dst) == 0
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(f"thread {t}: {e!r}")

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_upsert_racing_readers(store, key):
    k = key("v")

    def value(v):
        head = np.array([v], dtype=np.uint64).view(np.uint8)
        body = np.full(4096 + (v % 7) * 1024, v % 251, dtype=np.uint8)
        return np.concatenate([head, body])

    def consistent(data):
        v = int(np.frombuffer(data[:8], dtype=np.uint64)[0])
        return data == value(v).tobytes()

    assert store.upsert(k, value(0)) == 0
    done = threading.Event()
    bad, reads = [], [0]

    def reader():
        while not done.is_set():
            data = store.get(k)
            reads[0] += 1
            if not data or not consistent(data):
                bad.append(len(data))

    readers = [threading.Thread(target=reader) for _ in range(3)]
    for r in readers:
        r.start()
    for v in range(1, 150):
        assert store.upsert(k, value(v)) == 0
    done.set()
    for r in readers:
        r.join()
    assert not bad, bad[:5]
    assert reads[0] > 0
    assert consistent(store.get(k)) and store.get(k) == value(149).tobytes()
