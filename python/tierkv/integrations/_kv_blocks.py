"""Moving engine KV blocks between the engine's KV tensors and tierkv.

Objects are never read from or written to the engine's tensors in place: a layer's blocks are
gathered into a registered host staging buffer (pinned when CUDA is present) and put from
there, and loaded objects land in a staging buffer and are scattered into the engine's
blocks. On a GPU the gathers, scatters and host copies run on a side CUDA stream ordered by
events against the engine's stream; with CPU tensors the same code runs with plain copies on
the integration's threads. Staging decouples the engine's blocks from the store: once a
block's bytes are in staging, the engine may reuse the block while the put goes on.

A stored object is one block of one layer in the layer tensor's logical order with the block
dimension removed (for vLLM's ``[2, num_blocks, block_size, heads, head_size]``: K then V), or,
for cross-layer objects, every layer's block bytes one after another in layer order. A Mamba
layer's block is its state tensors' blocks one after another (``StateTensors``).
"""

import threading

import torch

from .. import _tierkv


def block_dim_of(shape, num_blocks):
    """The dimension of a layer tensor that indexes blocks: the first whose size is
    ``num_blocks`` (vLLM's FlashAttention ``[2, num_blocks, ...]`` has it second, FlashInfer's
    and MLA's layouts first). Without ``num_blocks``: dimension 1 for a 5-d tensor whose first
    dimension is 2, else 0."""
    if num_blocks:
        for d, n in enumerate(shape):
            if n == num_blocks and not (d == 0 and n == 2 and len(shape) == 5
                                        and shape[1] == num_blocks):
                return d
        raise ValueError(f"KV tensor of shape {tuple(shape)} has no dimension of "
                         f"{num_blocks} blocks")
    return 1 if len(shape) == 5 and shape[0] == 2 else 0


class LayerTensor:
    """One registered KV tensor: which dimension indexes blocks, and a block's bytes."""

    def __init__(self, name, tensor, num_blocks=None):
        self.name = name
        self.tensor = tensor
        self.block_dim = block_dim_of(tensor.shape, num_blocks)
        self.num_blocks = tensor.shape[self.block_dim]
        shape = list(tensor.shape)
        del shape[self.block_dim]
        self.block_shape = tuple(shape)
        self.block_bytes = tensor.element_size()
        for n in shape:
            self.block_bytes *= n
        self.is_cuda = tensor.device.type == "cuda"

    def gather(self, block_ids):
        """The blocks' bytes, [n, block_bytes] uint8, contiguous (on the tensor's device)."""
        idx = torch.as_tensor(block_ids, dtype=torch.long, device=self.tensor.device)
        g = self.tensor.index_select(self.block_dim, idx)
        if self.block_dim != 0:
            g = g.movedim(self.block_dim, 0)
        return g.contiguous().view(torch.uint8).view(len(block_ids), self.block_bytes)

    def scatter(self, block_ids, data):
        """Writes ``data`` ([n, block_bytes] uint8 on any device) into the blocks."""
        n = len(block_ids)
        src = data.view(self.tensor.dtype).view(n, *self.block_shape)
        if src.device != self.tensor.device:
            src = src.to(self.tensor.device, non_blocking=True)
        idx = torch.as_tensor(block_ids, dtype=torch.long, device=self.tensor.device)
        if self.block_dim != 0:
            src = src.movedim(0, self.block_dim)
        self.tensor.index_copy_(self.block_dim, idx, src)


class StateTensors:
    """A Mamba layer's state tensors (vLLM hands a list: conv state, SSM state, each
    ``[num_blocks, *shape]``, possibly strided views into one page) as one block source: a
    block's bytes are each tensor's block in order."""

    def __init__(self, name, tensors, num_blocks=None):
        self.name = name
        self.parts = [LayerTensor(f"{name}[{i}]", t, num_blocks) for i, t in enumerate(tensors)]
        if not self.parts:
            raise ValueError(f"layer {name!r}: an empty list of state tensors")
        counts = {p.num_blocks for p in self.parts}
        if len(counts) != 1:
            raise ValueError(f"layer {name!r}: state tensors of {sorted(counts)} blocks")
        self.tensor = self.parts[0].tensor
        self.num_blocks = self.parts[0].num_blocks
        self.block_bytes = sum(p.block_bytes for p in self.parts)
        self.is_cuda = self.parts[0].is_cuda

    def gather(self, block_ids):
        return torch.cat([p.gather(block_ids) for p in self.parts], dim=1)

    def scatter(self, block_ids, data):
        off = 0
        for p in self.parts:
            p.scatter(block_ids, data[:, off:off + p.block_bytes])
            off += p.block_bytes


def block_source(name, value, num_blocks=None):
    """A registered layer: one KV tensor, or a Mamba layer's list of state tensors."""
    if isinstance(value, (list, tuple)):
        return StateTensors(name, value, num_blocks)
    return LayerTensor(name, value, num_blocks)


class _Streams:
    """CUDA ordering when the tensors are on a GPU; nothing (plain copies) otherwise."""

    def __init__(self, device):
        self.cuda = device is not None and device.type == "cuda"
        self.side = torch.cuda.Stream(device=device) if self.cuda else None

    def engine_event(self):
        """An event after the engine's work queued so far (None on CPU)."""
        if not self.cuda:
            return None
        ev = torch.cuda.Event()
        ev.record(torch.cuda.current_stream())
        return ev

    def run(self, after, fn):
        """Runs fn on the side stream after event ``after``; returns an event marking its end
        (CPU: runs fn now, returns None)."""
        if not self.cuda:
            fn()
            return None
        with torch.cuda.stream(self.side):
            if after is not None:
                self.side.wait_event(after)
            fn()
            done = torch.cuda.Event()
            done.record(self.side)
        return done

    @staticmethod
    def host_wait(event):
        if event is not None:
            event.synchronize()

    @staticmethod
    def engine_wait(event):
        if event is not None:
            torch.cuda.current_stream().wait_event(event)


class Staging:
    """A registered host buffer cut into equal slots, handed out and returned (blocking when
    none is free: back-pressure rather than unbounded memory)."""

    def __init__(self, store, total_bytes, slots, pin):
        if slots < 1 or total_bytes // slots < 1:
            raise ValueError("staging buffer too small")
        self.slot_bytes = total_bytes // slots
        self.buf = torch.empty(self.slot_bytes * slots, dtype=torch.uint8,
                               pin_memory=bool(pin))
        self.base = self.buf.data_ptr()
        self.store = store
        rc = store.register_buffer(self.base, self.buf.numel())
        if rc != 0:
            raise RuntimeError(f"register_buffer of {self.buf.numel()} staging bytes failed: "
                               f"{_tierkv.strerror(rc)}")
        self._free = list(range(slots))
        self._cv = threading.Condition()

    def acquire(self):
        with self._cv:
            while not self._free:
                self._cv.wait()
            return self._free.pop()

    def release(self, slot):
        with self._cv:
            self._free.append(slot)
            self._cv.notify()

    def view(self, slot, nbytes):
        off = slot * self.slot_bytes
        return self.buf[off:off + nbytes]

    def addr(self, slot):
        return self.base + slot * self.slot_bytes

    def close(self):
        self.store.unregister_buffer(self.base)


def pin_wanted(tensors):
    return any(t.is_cuda for t in tensors) and torch.cuda.is_available()
