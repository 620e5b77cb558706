# Test double of lmcache/v1/memory_management.py (LMCache/LMCache, dev branch; MemoryObj API as in
# the pin_count/data_ptr/can_evict generation of the file, older snapshot @ 004446a04251774aae68bc880b61a1d7771501a2)
# plus the CPU side of lmcache/v1/memory_allocators/mixed_memory_allocator.py
# (MixedMemoryAllocator exposing `.pin_allocator.buffer`, which Mooncake's connector registers).
# NOT the real LMCache. Own code: one flat CPU buffer (pinned when CUDA is usable, else plain),
# first-fit free list with alignment, TensorMemoryObj views into it (zero-copy).
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import List, Optional, Tuple, Union
import abc
import ctypes
import math
import threading

import torch

from lmcache.logging import init_logger
from lmcache.utils import dtype_itemsize

logger = init_logger(__name__)


class MemoryFormat(Enum):
    UNDEFINED = 0
    KV_2LTD = 1       # [2, num_layers, num_tokens, hidden_dim]
    KV_T2D = 2        # [num_tokens, 2, hidden_dim]
    KV_2TD = 3        # [2, num_tokens, hidden_dim]
    BINARY = 4        # compressed binary array
    BINARY_BUFFER = 5
    KV_MLA_FMT = 6    # [1, num_layers, num_tokens, aligned_head_size]

    def token_dim(self) -> int:
        return {
            MemoryFormat.KV_2LTD: 2,
            MemoryFormat.KV_T2D: 1,   # as upstream (despite the [T,2,D] name)
            MemoryFormat.KV_2TD: 0,
            MemoryFormat.KV_MLA_FMT: 2,
        }.get(self, 0)


@dataclass
class MemoryObjMetadata:
    shape: torch.Size                 # logical shape (first group)
    dtype: Optional[torch.dtype]      # logical dtype (first group)
    address: int                      # offset in the allocator buffer
    phy_size: int                     # aligned bytes reserved
    ref_count: int
    pin_count: int = 0
    fmt: MemoryFormat = MemoryFormat.UNDEFINED
    cached_positions: Optional[torch.Tensor] = None
    shapes: Optional[list] = None     # multi-group (newer LMCache)
    dtypes: Optional[list] = None

    def get_size(self) -> int:
        if self.dtype is None or torch.Size(self.shape).numel() == 0:
            return 0
        return torch.Size(self.shape).numel() * dtype_itemsize(self.dtype)


class MemoryObj(metaclass=abc.ABCMeta):
    """Abstract memory object (same abstract surface as the real class)."""

    def __init__(self, metadata: MemoryObjMetadata):
        self.meta = metadata

    @abc.abstractmethod
    def invalidate(self): ...

    @abc.abstractmethod
    def is_valid(self): ...

    @abc.abstractmethod
    def get_size(self) -> int: ...

    @abc.abstractmethod
    def get_shape(self) -> torch.Size: ...

    def get_dtype(self) -> Optional[torch.dtype]:
        return None

    @abc.abstractmethod
    def get_memory_format(self) -> MemoryFormat: ...

    @abc.abstractmethod
    def get_physical_size(self) -> int: ...

    @abc.abstractmethod
    def pin(self) -> bool: ...

    @abc.abstractmethod
    def unpin(self) -> bool: ...

    @abc.abstractmethod
    def ref_count_up(self): ...

    @abc.abstractmethod
    def ref_count_down(self): ...

    @abc.abstractmethod
    def get_ref_count(self) -> int: ...

    @abc.abstractmethod
    def get_num_tokens(self) -> int: ...

    @property
    @abc.abstractmethod
    def metadata(self) -> MemoryObjMetadata: ...

    @property
    @abc.abstractmethod
    def tensor(self) -> Optional[torch.Tensor]: ...

    @property
    @abc.abstractmethod
    def byte_array(self) -> bytes: ...

    @property
    @abc.abstractmethod
    def data_ptr(self) -> int: ...

    @property
    @abc.abstractmethod
    def is_pinned(self) -> bool: ...

    @property
    @abc.abstractmethod
    def can_evict(self) -> bool: ...


def _logical_size(shapes: list, dtypes: list) -> int:
    return sum(torch.Size(s).numel() * dtype_itemsize(d) for s, d in zip(shapes, dtypes))


class TensorMemoryObj(MemoryObj):
    """A flat uint8 ``raw_data`` slice of the allocator buffer + metadata.

    ``tensor`` is a zero-copy typed view; ``data_ptr`` is the address inside
    the (pinned) buffer; ``byte_array`` is a writable memoryview over the
    whole raw slice.  ref_count reaching 0 (with pin_count 0) frees it.
    """

    def __init__(self, raw_data: torch.Tensor, metadata: MemoryObjMetadata,
                 parent_allocator: Optional["MemoryAllocatorInterface"] = None):
        assert metadata.dtype is not None, "dtype must be specified for TensorMemoryObj"
        self.raw_data = raw_data
        self.meta = metadata
        self.valid = True
        self.lock = threading.Lock()
        self.parent_allocator = parent_allocator

    def invalidate(self):
        self.valid = False

    def is_valid(self):
        return self.valid

    def _shapes_dtypes(self):
        if self.meta.shapes:
            return list(self.meta.shapes), list(self.meta.dtypes)
        return [self.meta.shape], [self.meta.dtype]

    def get_size(self) -> int:
        return _logical_size(*self._shapes_dtypes())

    def get_shape(self) -> torch.Size:
        return self.meta.shape

    def get_shapes(self) -> list:
        return self._shapes_dtypes()[0]

    def get_dtype(self) -> torch.dtype:
        return self.meta.dtype

    def get_dtypes(self) -> list:
        return self._shapes_dtypes()[1]

    def get_memory_format(self) -> MemoryFormat:
        with self.lock:
            return self.meta.fmt

    def get_physical_size(self) -> int:
        return self.meta.phy_size

    def ref_count_up(self):
        with self.lock:
            self.meta.ref_count += 1

    def ref_count_down(self):
        free = False
        with self.lock:
            self.meta.ref_count -= 1
            if self.meta.ref_count < 0:
                logger.warning("MemoryObj ref count went negative (double free)")
                self.meta.ref_count = 0
            free = (self.meta.ref_count == 0 and self.meta.pin_count == 0
                    and self.parent_allocator is not None)
        if free:
            self.parent_allocator.free(self)

    def get_ref_count(self) -> int:
        with self.lock:
            return self.meta.ref_count

    def get_num_tokens(self) -> int:
        with self.lock:
            return self.meta.shape[self.meta.fmt.token_dim()]

    def pin(self) -> bool:
        with self.lock:
            self.meta.pin_count += 1
        return True

    def unpin(self) -> bool:
        free = False
        with self.lock:
            self.meta.pin_count -= 1
            if self.meta.pin_count < 0:
                logger.warning("MemoryObj pin count went negative (double unpin)")
                self.meta.pin_count = 0
            free = (self.meta.pin_count == 0 and self.meta.ref_count <= 0
                    and self.parent_allocator is not None)
        if free:
            self.parent_allocator.free(self)
        return True

    @property
    def metadata(self) -> MemoryObjMetadata:
        with self.lock:
            return self.meta

    @property
    def tensor(self) -> Optional[torch.Tensor]:
        if not self.valid:
            logger.warning("Trying to access an invalidated MemoryObj")
            return None
        nbytes = self.meta.get_size()
        return self.raw_data[:nbytes].view(self.meta.dtype).view(self.meta.shape)

    @property
    def tensors(self) -> List[torch.Tensor]:
        """One typed view per (shape, dtype) group (newer multi-group API)."""
        out, off = [], 0
        for s, d in zip(*self._shapes_dtypes()):
            n = torch.Size(s).numel() * dtype_itemsize(d)
            out.append(self.raw_data[off:off + n].view(d).view(s))
            off += n
        return out

    @property
    def raw_tensor(self) -> torch.Tensor:
        return self.raw_data

    @property
    def byte_array(self) -> memoryview:
        n = self.raw_data.numel() * self.raw_data.element_size()
        buf = (ctypes.c_ubyte * n).from_address(self.raw_data.data_ptr())
        return memoryview(buf)

    @property
    def data_ptr(self) -> int:
        return self.raw_data.data_ptr()

    @property
    def is_pinned(self) -> bool:
        return self.meta.pin_count > 0

    @property
    def can_evict(self) -> bool:
        return not self.is_pinned and self.get_ref_count() == 1


class BytesBufferMemoryObj(MemoryObj):
    """Wraps python bytes (fmt BINARY_BUFFER); no ref counting."""

    def __init__(self, raw_bytes: bytes, metadata: Optional[MemoryObjMetadata] = None):
        self.raw_data = raw_bytes
        self.meta = metadata or MemoryObjMetadata(
            shape=torch.Size([len(raw_bytes), 0, 0, 0]), dtype=None, address=0,
            phy_size=0, ref_count=1, pin_count=0, fmt=MemoryFormat.BINARY_BUFFER)
        self.valid = True

    def invalidate(self):
        self.valid = False

    def is_valid(self):
        return self.valid

    def get_size(self) -> int:
        return len(self.raw_data)

    def get_shape(self) -> torch.Size:
        return torch.Size([len(self.raw_data), 0, 0, 0])

    def get_memory_format(self) -> MemoryFormat:
        return self.meta.fmt

    def get_physical_size(self) -> int:
        return self.meta.phy_size

    def pin(self) -> bool:
        self.meta.pin_count += 1
        return True

    def unpin(self) -> bool:
        self.meta.pin_count = max(0, self.meta.pin_count - 1)
        return True

    def ref_count_up(self):
        pass

    def ref_count_down(self):
        pass

    def get_ref_count(self) -> int:
        return 1

    def get_num_tokens(self) -> int:
        return 1

    @property
    def metadata(self) -> MemoryObjMetadata:
        return self.meta

    @property
    def tensor(self) -> Optional[torch.Tensor]:
        return None

    @property
    def byte_array(self) -> bytes:
        return self.raw_data

    @property
    def data_ptr(self) -> int:
        buf = self.raw_data if isinstance(self.raw_data, bytearray) else bytearray(self.raw_data)
        return ctypes.addressof(ctypes.c_char.from_buffer(buf))

    @property
    def is_pinned(self) -> bool:
        return self.meta.pin_count > 0

    @property
    def can_evict(self) -> bool:
        return not self.is_pinned


ShapeArg = Union[torch.Size, Tuple[int, ...], List[torch.Size]]
DtypeArg = Union[torch.dtype, List[torch.dtype]]


def _normalize(shapes: ShapeArg, dtypes: DtypeArg):
    if isinstance(shapes, list) and shapes and not isinstance(shapes[0], int):
        shape_list = [torch.Size(s) for s in shapes]
    else:
        shape_list = [torch.Size(shapes)]
    dtype_list = list(dtypes) if isinstance(dtypes, (list, tuple)) else [dtypes] * len(shape_list)
    if len(dtype_list) != len(shape_list):
        raise ValueError("shapes and dtypes must have the same length")
    return shape_list, dtype_list


class MemoryAllocatorInterface(metaclass=abc.ABCMeta):
    @abc.abstractmethod
    def allocate(self, shapes: ShapeArg, dtypes: Optional[DtypeArg],
                 fmt: MemoryFormat = MemoryFormat.UNDEFINED,
                 allocator_type: Optional[str] = None) -> Optional[MemoryObj]: ...

    @abc.abstractmethod
    def batched_allocate(self, shapes: ShapeArg, dtypes: Optional[DtypeArg], batch_size: int,
                         fmt: MemoryFormat = MemoryFormat.UNDEFINED,
                         allocator_type: Optional[str] = None) -> Optional[List[MemoryObj]]: ...

    @abc.abstractmethod
    def free(self, memory_obj: MemoryObj, allocator_type: Optional[str] = None): ...

    def batched_free(self, memory_objs: List[MemoryObj], allocator_type: Optional[str] = None,
                     update_stats: bool = True):
        for m in memory_objs:
            self.free(m, allocator_type)

    def close(self):
        return

    def memcheck(self):
        return True


def _make_buffer(size: int, pin: Optional[bool]) -> Tuple[torch.Tensor, bool]:
    want_pin = torch.cuda.is_available() if pin is None else pin
    buf = torch.zeros(size, dtype=torch.uint8)
    if want_pin:
        try:
            return buf.pin_memory(), True
        except Exception:  # no CUDA driver: plain pageable memory
            logger.warning("pin_memory unavailable; using plain CPU buffer")
    return buf, False


class TensorMemoryAllocator(MemoryAllocatorInterface):
    """First-fit allocator over one flat uint8 buffer (``self.buffer``)."""

    ALIGN_BYTES = 4096

    def __init__(self, tensor: torch.Tensor, align_bytes: int = ALIGN_BYTES):
        self.buffer = tensor.view(torch.uint8).flatten()
        self.align_bytes = align_bytes
        self.lock = threading.Lock()
        self._free: List[List[int]] = [[0, self.buffer.numel()]]  # [start, size], sorted
        self.num_active_allocations = 0
        self.total_allocated_size = 0

    @property
    def buffer_size(self) -> int:
        return self.buffer.numel()

    def _align(self, n: int) -> int:
        a = self.align_bytes
        return max(a, (n + a - 1) // a * a)

    def _take(self, size: int) -> Optional[int]:
        for i, (start, avail) in enumerate(self._free):
            if avail >= size:
                if avail == size:
                    self._free.pop(i)
                else:
                    self._free[i] = [start + size, avail - size]
                return start
        return None

    def _give(self, start: int, size: int):
        blocks = self._free
        blocks.append([start, size])
        blocks.sort()
        merged: List[List[int]] = []
        for b in blocks:
            if merged and merged[-1][0] + merged[-1][1] == b[0]:
                merged[-1][1] += b[1]
            else:
                merged.append(b)
        self._free = merged

    def allocate(self, shapes, dtypes, fmt=MemoryFormat.UNDEFINED, allocator_type=None):
        shape_list, dtype_list = _normalize(shapes, dtypes)
        raw = _logical_size(shape_list, dtype_list)
        phy = self._align(raw)
        with self.lock:
            start = self._take(phy)
            if start is None:
                return None
            self.num_active_allocations += 1
            self.total_allocated_size += phy
        meta = MemoryObjMetadata(
            shape=shape_list[0], dtype=dtype_list[0], address=start, phy_size=phy,
            ref_count=1, pin_count=0, fmt=fmt,
            shapes=shape_list if len(shape_list) > 1 else None,
            dtypes=dtype_list if len(shape_list) > 1 else None)
        return TensorMemoryObj(self.buffer[start:start + raw], meta, parent_allocator=self)

    def batched_allocate(self, shapes, dtypes, batch_size, fmt=MemoryFormat.UNDEFINED,
                         allocator_type=None):
        objs: List[MemoryObj] = []
        for _ in range(batch_size):
            o = self.allocate(shapes, dtypes, fmt)
            if o is None:
                for done in objs:
                    self.free(done)
                return None
            objs.append(o)
        return objs

    def free(self, memory_obj: MemoryObj, allocator_type=None):
        if not memory_obj.is_valid():
            return
        memory_obj.invalidate()
        with self.lock:
            self._give(memory_obj.meta.address, memory_obj.meta.phy_size)
            self.num_active_allocations -= 1
            self.total_allocated_size -= memory_obj.meta.phy_size

    def memcheck(self) -> bool:
        with self.lock:
            free = sum(b[1] for b in self._free)
            return free + self.total_allocated_size == self.buffer.numel()


class PinMemoryAllocator(TensorMemoryAllocator):
    """Allocator over a pinned CPU buffer (plain CPU if pinning is impossible)."""

    def __init__(self, size: int, align_bytes: int = TensorMemoryAllocator.ALIGN_BYTES,
                 pin: Optional[bool] = None):
        buf, self.is_pinned_buffer = _make_buffer(size, pin)
        super().__init__(buf, align_bytes)


class MixedMemoryAllocator(MemoryAllocatorInterface):
    """KV formats -> ``pin_allocator`` (flat pinned buffer); BINARY_BUFFER -> bytearray."""

    def __init__(self, size: int, align_bytes: int = TensorMemoryAllocator.ALIGN_BYTES,
                 pin: Optional[bool] = None, **_ignored):
        self.pin_allocator = PinMemoryAllocator(size, align_bytes, pin)
        self.align_bytes = align_bytes
        self.size = size

    @property
    def buffer(self) -> torch.Tensor:
        return self.pin_allocator.buffer

    @property
    def total_allocated_size(self) -> int:
        return self.pin_allocator.total_allocated_size

    def allocate(self, shapes, dtypes, fmt=MemoryFormat.UNDEFINED, allocator_type=None):
        if fmt == MemoryFormat.BINARY_BUFFER:
            shape_list, _ = _normalize(shapes, dtypes if dtypes is not None else torch.uint8)
            return BytesBufferMemoryObj(bytearray(int(shape_list[0][0])))
        return self.pin_allocator.allocate(shapes, dtypes, fmt)

    def batched_allocate(self, shapes, dtypes, batch_size, fmt=MemoryFormat.UNDEFINED,
                         allocator_type=None):
        return self.pin_allocator.batched_allocate(shapes, dtypes, batch_size, fmt)

    def free(self, memory_obj, allocator_type=None):
        if isinstance(memory_obj, TensorMemoryObj):
            self.pin_allocator.free(memory_obj)

    def memcheck(self) -> bool:
        return self.pin_allocator.memcheck()
