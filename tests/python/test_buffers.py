"""Buffer arguments: numpy, bytearray, memoryview, torch tensors and raw addresses; bad
arguments give per-key codes or clear exceptions, never a crash or a write outside the
caller's buffer; local_buffer_size semantics."""

import ctypes

import numpy as np
import pytest
import torch

import tierkv
from tierkv import ErrorCode as E

N = 8192


def test_every_buffer_kind(embedded, key):
    s = embedded
    src = np.arange(N, dtype=np.uint8)
    kinds = {
        "numpy": np.zeros(N, dtype=np.uint8),
        "bytearray": bytearray(N),
        "memoryview": memoryview(bytearray(N)),
        "torch": torch.zeros(N, dtype=torch.uint8),
        "ctypes": (ctypes.c_ubyte * N)(),
    }
    assert s.register_buffer(src) == 0  # size taken from the object
    assert s.put_from(key("src"), src, N) == 0
    for name, dst in kinds.items():
        assert s.register_buffer(dst) == 0, name
        assert s.get_into(key("src"), dst, N) == N, name
        assert bytes(memoryview(dst.numpy() if name == "torch" else dst)) == src.tobytes(), name
        assert s.put_from(key(name), dst, N) == 0, name
        assert s.unregister_buffer(dst) == 0, name
    # Raw addresses, as engines pass tensor.data_ptr().
    t = torch.zeros(N, dtype=torch.uint8)
    assert s.register_buffer(t.data_ptr(), N) == 0
    assert s.get_into(key("numpy"), t.data_ptr(), N) == N
    assert torch.equal(t, torch.arange(N, dtype=torch.int64).to(torch.uint8))
    assert s.batch_get_into_multi_buffers([key("torch")], [[t, t.data_ptr() + N // 2]],
                                          [[N // 2, N // 2]]) == [N]


def test_bad_arguments_raise_clear_errors(embedded, key):
    s = embedded
    buf = np.zeros(N, dtype=np.uint8)
    assert s.register_buffer(buf) == 0
    with pytest.raises(ValueError, match="exceeds"):
        s.get_into(key("x"), buf, N + 1)  # larger than the object passed
    with pytest.raises(ValueError, match="negative"):
        s.put_from(key("x"), buf.ctypes.data, -1)
    with pytest.raises(ValueError, match="negative"):
        s.batch_get_into([key("x")], [buf.ctypes.data], [-5])
    with pytest.raises(ValueError, match="contiguous"):
        s.get_into(key("x"), np.zeros((64, 64), dtype=np.uint8)[:, ::2], 16)
    with pytest.raises(ValueError, match="contiguous"):
        s.put_from(key("x"), torch.zeros(64, 64)[:, ::2], 16)
    with pytest.raises(ValueError, match="writable"):
        s.get_into(key("x"), b"read-only bytes", 4)
    with pytest.raises(TypeError):
        s.get_into(key("x"), "not a buffer", 4)
    with pytest.raises(TypeError):
        s.batch_is_exist("not a list")
    with pytest.raises(ValueError, match="64 bits"):
        s.put_from(key("x"), 1 << 70, 4)
    # Lists shorter than the keys: the keys they miss fail, the others go through.
    # Lists shorter (or longer) than keys fail every key, as Mooncake's batch_put_from does.
    assert s.batch_put_from([key("a"), key("b")], [buf.ctypes.data], [4]) == \
        [E.INVALID_PARAMS, E.INVALID_PARAMS]
    assert s.is_exist(key("a")) == 0


def test_local_buffer_limits_bounce_calls(key):
    s = tierkv.DistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", 32 << 20, 64 << 10, "tcp", "", "") == 0
    assert s.put(key("small"), b"x" * 1000) == 0
    assert s.put(key("big"), b"x" * (128 << 10)) == E.BUFFER_OVERFLOW  # needs more than 64 KiB
    assert s.is_exist(key("big")) == 0  # nothing stored
    # Zero-copy calls on registered memory do not use the local buffer.
    big = np.ones(128 << 10, dtype=np.uint8)
    assert s.register_buffer(big) == 0
    assert s.put_from(key("big"), big, big.nbytes) == 0
    assert s.get(key("big")) == b""  # a get through the local buffer cannot hold it
    assert s.get_buffer(key("big")) is None
    s.close()


def test_local_buffer_zero_is_accepted(key):
    s = tierkv.DistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", 32 << 20, 0, "tcp", "", "") == 0
    assert s.put(key("a"), b"abc") == E.BUFFER_OVERFLOW
    assert s.put_batch([key("a")], [b"abc"]) == E.BUFFER_OVERFLOW
    assert s.put_tensor(key("t"), torch.ones(4)) == E.BUFFER_OVERFLOW
    assert s.is_exist(key("a")) == 0
    buf = np.arange(16, dtype=np.uint8)
    assert s.register_buffer(buf) == 0
    assert s.put_from(key("a"), buf, 16) == 0
    assert s.get(key("a")) == b""
    out = np.zeros(16, dtype=np.uint8)
    assert s.register_buffer(out) == 0
    assert s.get_into(key("a"), out, 16) == 16 and np.array_equal(out, buf)
    s.close()


def test_buffer_handle_outlives_close(key):
    s = tierkv.DistributedStore()
    assert s.setup("localhost", "P2PHANDSHAKE", 32 << 20, 1 << 20, "tcp", "", "") == 0
    assert s.put(key("h"), b"kept") == 0
    h = s.get_buffer(key("h"))
    assert s.close() == 0
    assert bytes(h) == b"kept"
