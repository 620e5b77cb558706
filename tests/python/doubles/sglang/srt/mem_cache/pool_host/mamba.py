# TEST DOUBLE (tierkv tests), not SGLang. CPU-only.
# Mirrors MambaPoolHost of python/sglang/srt/mem_cache/pool_host/mamba.py of sgl-project/sglang
# @ 02f0c2a0f8e4540dd6484b74f3d5b4ea4509f206: page_size 1 (one slot = one request's state),
# page_first / page_first_direct only; a temporal (SSM) buffer (size, layers, 1, *shape) and
# one buffer per conv state (size, layers, 1, *shape); kv_buffer is the list of the non-empty
# ones; get_hybrid_pool_buffer() = [temporal, *conv]; get_data_page = the slot's temporal
# bytes then each conv state's bytes (uint8); set_from_flat_data_page splits them back;
# get_page_buffer_meta gives per slot [temporal_ptr (left out when the temporal state is
# empty), conv_0_ptr, ...] with sizes layers * elements * itemsize. The device pool is
# FakeMambaDevicePool (only the shapes and dtypes the host pool reads). Own code.
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import List, Tuple

import torch

from sglang.srt.mem_cache.memory_pool_host import HostKVCache, _itemsize, synchronized


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


@dataclass
class FakeMambaDevicePool:
    """Stand-in for the device MambaPool: state shapes (without the layer and slot dims)."""

    size: int
    num_mamba_layers: int = 2
    temporal_shape: Tuple[int, ...] = (2, 4)
    conv_shapes: List[Tuple[int, ...]] = field(default_factory=lambda: [(3, 4)])
    temporal_dtype: torch.dtype = torch.float32
    conv_dtype: torch.dtype = torch.bfloat16
    device: str = "cpu"


class MambaPoolHost(HostKVCache):
    def __init__(
        self,
        device_pool: FakeMambaDevicePool,
        host_to_device_ratio: float,
        host_size: int,
        pin_memory: bool = False,
        device: str = "cpu",
        allocator_type: str = "default",
        layout: str = "layer_first",
    ):
        self.device_pool = device_pool
        self.page_size = 1
        assert layout in ["page_first", "page_first_direct"], f"Unsupported layout: {layout}"
        self.layout = layout
        self.pin_memory = False
        self.device = device
        self.allocator = None
        self.num_mamba_layers = device_pool.num_mamba_layers
        self.conv_state_shapes = [tuple(s) for s in device_pool.conv_shapes]
        self.temporal_state_shape = tuple(device_pool.temporal_shape)
        self.temporal_state_elem_size = _numel(self.temporal_state_shape)
        self.conv_state_elem_sizes = [_numel(s) for s in self.conv_state_shapes]
        self.conv_dtype = device_pool.conv_dtype
        self.temporal_dtype = device_pool.temporal_dtype
        self.dtype = self.conv_dtype
        self.size_per_token = self.get_size_per_token()
        if host_size > 0:
            self.size = int(host_size * 1e9 // self.size_per_token)
        else:
            self.size = int(device_pool.size * host_to_device_ratio)
        self.page_num = self.size // self.page_size + 1
        self.size = self.page_num * self.page_size
        self.can_use_write_back_jit = True
        self.kv_buffer = self.init_kv_buffer()
        self.lock = threading.RLock()
        self.clear()

    def get_size_per_token(self):
        conv = sum(n * _itemsize(self.conv_dtype) for n in self.conv_state_elem_sizes)
        temporal = self.temporal_state_elem_size * _itemsize(self.temporal_dtype)
        return (conv + temporal) * self.num_mamba_layers

    def get_ksize_per_token(self):
        return self.get_size_per_token()

    def init_kv_buffer(self):
        L = self.num_mamba_layers
        self.temporal_buffer = torch.zeros(
            (self.size, L, 1) + self.temporal_state_shape, dtype=self.temporal_dtype)
        self.conv_buffer = [torch.zeros((self.size, L, 1) + s, dtype=self.conv_dtype)
                            for s in self.conv_state_shapes]
        return [b for b in (self.temporal_buffer, *self.conv_buffer) if b.numel() > 0]

    def get_hybrid_pool_buffer(self):
        return [self.temporal_buffer, *self.conv_buffer]

    def _iter_page_tensors(self, index):
        yield self.temporal_buffer[index]
        for conv in self.conv_buffer:
            yield conv[index]

    def get_data_page(self, index, flat: bool = True) -> torch.Tensor:
        page = torch.cat([t.contiguous().view(torch.uint8).reshape(-1)
                          for t in self._iter_page_tensors(int(index))])
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros(self.page_size * self.size_per_token, dtype=torch.uint8)

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        flat = data_page.contiguous().view(torch.uint8).reshape(-1)
        start = 0
        for t in self._iter_page_tensors(int(index)):
            n = t.numel() * t.element_size()
            t.copy_(flat[start : start + n].view(t.dtype).reshape(t.shape))
            start += n

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        idx = indices.tolist() if hasattr(indices, "tolist") else list(indices)
        L = self.num_mamba_layers
        t_size = self.page_size * L * _itemsize(self.temporal_dtype) * self.temporal_state_elem_size
        c_sizes = [self.page_size * L * _itemsize(self.conv_dtype) * n
                   for n in self.conv_state_elem_sizes]
        ptrs: List[int] = []
        sizes: List[int] = []
        for i in range(0, len(idx), self.page_size):
            if self.temporal_state_elem_size > 0:
                ptrs.append(self.temporal_buffer.data_ptr() + idx[i] * t_size // self.page_size)
                sizes.append(t_size)
            for buf, c in zip(self.conv_buffer, c_sizes):
                ptrs.append(buf.data_ptr() + idx[i] * c // self.page_size)
                sizes.append(c)
        return ptrs, sizes

    @synchronized
    def clear(self):
        self.mem_state = torch.zeros((self.size,), dtype=torch.uint8)
        self.free_slots = torch.arange(self.size, dtype=torch.int64)


def make_mamba_host_pool(num_slots: int = 16, layout: str = "page_first",
                         **device_kwargs) -> MambaPoolHost:
    return MambaPoolHost(FakeMambaDevicePool(size=num_slots, **device_kwargs), 1.0, 0,
                         layout=layout)
