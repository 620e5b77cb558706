"""Tensor calls (torch from Debian): dtype and shape survive; a wrong destination is an error,
never a partial write; TP shards."""

import numpy as np
import pytest
import torch

import tierkv
from tierkv import ErrorCode as E

HEADER = 128  # docs/python.md, "Tensor objects"

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool]


def sample(dtype, shape=(3, 5, 7)):
    t = torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(shape)
    return (t % 2).to(dtype) if dtype == torch.bool else t.to(dtype)


def test_round_trip_every_dtype(store, key):
    for i, dtype in enumerate(DTYPES):
        t = sample(dtype)
        assert store.put_tensor(key(str(i)), t) == 0, dtype
        out = store.get_tensor(key(str(i)))
        assert out.dtype == dtype and out.shape == t.shape and torch.equal(out, t), dtype
    assert store.get_tensor(key("missing")) is None
    # Non-contiguous and 0-d and empty tensors.
    nc = torch.arange(24, dtype=torch.float32).reshape(4, 6)[:, ::2]
    assert store.put_tensor(key("nc"), nc) == 0 and torch.equal(store.get_tensor(key("nc")), nc)
    assert store.put_tensor(key("0d"), torch.tensor(3.5)) == 0
    assert store.get_tensor(key("0d")).item() == 3.5
    assert store.put_tensor(key("empty"), torch.zeros(0, 4)) == 0
    assert store.get_tensor(key("empty")).shape == (0, 4)
    with pytest.raises(TypeError):
        store.put_tensor(key("np"), np.zeros(3))
    with pytest.raises(TypeError):
        store.put_tensor(key("c"), torch.zeros(2, dtype=torch.complex64))


def test_batch_and_upsert(store, key):
    ts = [sample(torch.float32, (2, 3)), sample(torch.int64, (4,))]
    assert store.batch_put_tensor([key("a"), key("b"), ""], ts + [ts[0]]) == [0, 0, E.INVALID_KEY]
    got = store.batch_get_tensor([key("a"), key("missing"), key("b")])
    assert torch.equal(got[0], ts[0]) and got[1] is None and torch.equal(got[2], ts[1])
    assert store.pub_tensor(key("c"), ts[0], tierkv.ReplicateConfig()) == 0
    assert store.batch_pub_tensor([key("d")], [ts[1]]) == [0]
    assert store.upsert_tensor(key("a"), ts[1]) == 0
    assert torch.equal(store.get_tensor(key("a")), ts[1])
    assert store.batch_upsert_tensor([key("a"), key("e")], [ts[0], ts[0]]) == [0, 0]
    assert torch.equal(store.get_tensor(key("e")), ts[0])
    # A bytes object is not a tensor object.
    assert store.put(key("raw"), b"not a tensor") == 0
    assert store.get_tensor(key("raw")) is None


def test_get_tensor_into_buffers_and_tensors(store, key):
    t = sample(torch.float32, (8, 16))
    nbytes = t.numel() * 4
    assert store.put_tensor(key("t"), t) == 0
    buf = np.full(HEADER + nbytes + 4096, 0x5A, dtype=np.uint8)
    assert store.register_buffer(buf.ctypes.data, HEADER + nbytes) == 0
    view = store.get_tensor_into(key("t"), buf.ctypes.data, HEADER + nbytes)
    assert torch.equal(view, t)
    assert (buf[HEADER + nbytes:] == 0x5A).all()
    buf[:] = 0x5A
    assert store.get_tensor_into(key("t"), buf.ctypes.data, HEADER + nbytes - 1) is None
    assert (buf == 0x5A).all()  # too small: nothing written
    assert store.get_tensor_into(key("missing"), buf.ctypes.data, HEADER + nbytes) is None
    out = store.batch_get_tensor_into([key("t"), key("missing")],
                                      [buf.ctypes.data, buf.ctypes.data], [HEADER + nbytes] * 2)
    assert torch.equal(out[0], t) and out[1] is None
    # A destination tensor: dtype and shape must match, else an error and nothing written.
    dst = torch.zeros(8, 16)
    assert store.get_tensor_into(key("t"), dst) == nbytes and torch.equal(dst, t)
    for wrong in [torch.zeros(8, 16, dtype=torch.float64), torch.zeros(16, 8), torch.zeros(8, 15)]:
        wrong.fill_(7)
        assert store.get_tensor_into(key("t"), wrong) == E.INVALID_PARAMS
        assert (wrong == 7).all()
    assert store.get_tensor_into(key("missing"), dst) == E.OBJECT_NOT_FOUND
    # put_tensor_from: a laid-out tensor object in registered memory.
    assert store.get_into(key("t"), buf.ctypes.data, HEADER + nbytes) == HEADER + nbytes
    assert store.put_tensor_from(key("copy"), buf.ctypes.data, HEADER + nbytes) == 0
    assert torch.equal(store.get_tensor(key("copy")), t)
    assert store.put_tensor_from(key("bad"), buf.ctypes.data, HEADER + nbytes - 4) == \
        E.INVALID_PARAMS
    junk = np.zeros(256, dtype=np.uint8)
    assert store.put_tensor_from(key("bad"), junk.ctypes.data, 256) == E.BUFFER_NOT_REGISTERED


def test_tensor_parallel_shards(store, key):
    t = sample(torch.float32, (4, 6, 2))
    assert store.put_tensor_with_tp(key("w"), t, tp_rank=0, tp_size=3, split_dim=1) == 0
    shards = [store.get_tensor_with_tp(key("w"), tp_rank=r, tp_size=3, split_dim=1)
              for r in range(3)]
    for r, shard in enumerate(shards):
        assert torch.equal(shard, t[:, 2 * r:2 * r + 2, :]), r
    assert store.get_tensor(key("w") + "_tp_1") is not None
    assert torch.equal(torch.cat(shards, dim=1), t)
    assert store.put_tensor_with_tp(key("odd"), t, tp_size=4, split_dim=1) == E.INVALID_PARAMS
    assert store.put_tensor_with_tp(key("dim"), t, tp_size=2, split_dim=5) == E.INVALID_PARAMS
    assert store.put_tensor_with_tp(key("neg"), t, tp_size=2, split_dim=-1) == 0
    assert torch.equal(store.get_tensor_with_tp(key("neg"), 1, 2), t[:, :, 1:])
    assert store.put_tensor_with_tp(key("one"), t) == 0  # tp_size 1: the key itself
    assert torch.equal(store.get_tensor_with_tp(key("one")), t)
