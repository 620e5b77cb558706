# TEST DOUBLE (tierkv tests), not SGLang. CPU-only, torch-based.
# Mirrors the host KV pools a HiCache storage backend sees:
#   HostKVCache          <- python/sglang/srt/mem_cache/pool_host/base.py@049f8e64daef5f97982ffd46d89c2277ce260a16
#   MHATokenToKVPoolHost <- python/sglang/srt/mem_cache/pool_host/mha.py@0047d999bb3a3ad311df5a4b6356bfb5586e0d66
#   MLATokenToKVPoolHost <- python/sglang/srt/mem_cache/pool_host/mla.py@01c0ede38cc9645488fd2847dbea8a2f6a9241d8
# (older SGLang, e.g. v0.5.x, kept these classes in mem_cache/memory_pool_host.py, the
# module path used here; newer SGLang re-exports them from sglang.srt.mem_cache.pool_host,
# which this double also provides). Same constructor signature, sizing rule, kv_buffer
# shapes per layout, get_data_page / get_dummy_flat_data_page / set_from_flat_data_page /
# get_page_buffer_meta semantics, including MLA's Ascend page_first_kv_split (separate K, V,
# indexer K and FP32 scale buffers, mla.py@01c0ede3; get_data_page raises for it as there).
# No device transfer (load/backup are no-ops), no pinning.
# Use FakeMHADevicePool / FakeMLADevicePool (or make_mha_host_pool / make_mla_host_pool) in
# place of the GPU pool. Own code; see /work/specs/sglang.md.
from __future__ import annotations

import abc
import threading
from dataclasses import dataclass
from functools import wraps
from typing import List, Optional, Tuple

import torch

def _itemsize(dtype: torch.dtype) -> int:
    # real code uses dtype.itemsize (torch >= 2.1); the test machine has torch 1.13
    return torch.empty((), dtype=dtype).element_size()


LAYOUTS_MHA = ("layer_first", "page_first", "page_first_direct", "page_head")
LAYOUTS_MLA = ("layer_first", "page_first", "page_first_direct", "page_first_kv_split")


def synchronized(func):
    @wraps(func)
    def wrapper(self, *args, **kwargs):
        with self.lock:
            return func(self, *args, **kwargs)

    return wrapper


@dataclass
class FakeMHADevicePool:
    """Stand-in for the device MHATokenToKVPool: only the attributes host pools read."""

    size: int
    layer_num: int
    head_num: int
    head_dim: int
    store_dtype: torch.dtype = torch.float16
    start_layer: int = 0
    device: str = "cpu"

    @property
    def end_layer(self) -> int:
        return self.start_layer + self.layer_num - 1

    @property
    def row_dim(self) -> int:  # newer mha.py derives head_num = row_dim // head_dim
        return self.head_num * self.head_dim


@dataclass
class FakeMLADevicePool:
    """Stand-in for the device MLATokenToKVPool."""

    size: int
    layer_num: int
    kv_lora_rank: int = 512
    qk_rope_head_dim: int = 64
    store_dtype: torch.dtype = torch.bfloat16
    start_layer: int = 0
    device: str = "cpu"
    index_head_dim: Optional[int] = None
    # Ascend DSA (page_first_kv_split): indexer layers (None = all), an FP32 indexer scale
    # buffer, FP8 DSA packing V into K (the host V mirror is then not persisted).
    num_indexer_layers: Optional[int] = None
    index_k_scale_buffer: Optional[object] = None
    dsa_kv_cache_store_fp8: bool = False

    @property
    def end_layer(self) -> int:
        return self.start_layer + self.layer_num - 1


class HostKVCache(abc.ABC):
    def __init__(
        self,
        device_pool,
        host_to_device_ratio: float,
        host_size: int,
        page_size: int,
        layout: str,
        pin_memory: bool = False,
        device: str = "cpu",
        allocator_type: str = "default",
    ):
        self.device_pool = device_pool
        self.page_size = page_size
        self.layout = layout
        self.pin_memory = False  # CPU-only double: never pin
        self.device = device
        self.allocator = None
        self.can_use_write_back_jit = False
        self.dtype = device_pool.store_dtype
        self.size_per_token = self.get_size_per_token()
        if host_size > 0:  # GB
            self.size = int(host_size * 1e9 // self.size_per_token)
        else:
            self.size = int(device_pool.size * host_to_device_ratio)
        # real rule: align up to pages, always one extra page
        self.page_num = self.size // self.page_size + 1
        self.size = self.page_num * self.page_size
        self.start_layer = device_pool.start_layer
        self.end_layer = device_pool.end_layer
        self.kv_buffer = self.init_kv_buffer()
        self.lock = threading.RLock()
        self.clear()

    @abc.abstractmethod
    def get_size_per_token(self) -> int: ...

    @abc.abstractmethod
    def init_kv_buffer(self): ...

    @abc.abstractmethod
    def get_data_page(self, index, flat: bool = True) -> torch.Tensor: ...

    @abc.abstractmethod
    def get_dummy_flat_data_page(self) -> torch.Tensor: ...

    @abc.abstractmethod
    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None: ...

    def load_to_device_per_layer(self, device_pool, host_indices, device_indices, layer_id, io_backend):
        pass  # no device in the double

    def backup_from_device_all_layer(self, device_pool, host_indices, device_indices, io_backend):
        pass  # no device in the double

    def destroy(self):
        self.kv_buffer = None

    @synchronized
    def clear(self):
        self.mem_state = torch.zeros((self.size,), dtype=torch.uint8)
        self.free_slots = torch.arange(self.size, dtype=torch.int64)

    def available_size(self):
        return len(self.free_slots)

    @synchronized
    def alloc(self, need_size: int) -> Optional[torch.Tensor]:
        assert need_size % self.page_size == 0, "The requested size should be a multiple of the page size."
        if need_size > self.available_size():
            return None
        sel = self.free_slots[:need_size]
        self.free_slots = self.free_slots[need_size:]
        return sel

    @synchronized
    def free(self, indices: torch.Tensor) -> int:
        self.free_slots = torch.cat([self.free_slots, indices.cpu()])
        return len(indices)


class MHATokenToKVPoolHost(HostKVCache):
    def __init__(
        self,
        device_pool,
        host_to_device_ratio: float,
        host_size: int,
        page_size: int,
        layout: str,
        pin_memory: bool = False,
        device: str = "cpu",
        allocator_type: str = "default",
    ):
        super().__init__(device_pool, host_to_device_ratio, host_size, page_size, layout,
                         pin_memory, device, allocator_type)
        self.element_dim = self.head_num * self.head_dim

    def get_size_per_token(self):
        self.head_num = self.device_pool.head_num
        self.head_dim = self.device_pool.head_dim
        self.layer_num = self.device_pool.layer_num
        return self.head_dim * self.head_num * self.layer_num * _itemsize(self.dtype) * 2

    def get_ksize_per_token(self):
        return self.get_size_per_token() // 2

    def init_kv_buffer(self):
        L, H, D, P = self.layer_num, self.head_num, self.head_dim, self.page_size
        if self.layout == "layer_first":
            dims = (2, L, self.size, H, D)
        elif self.layout == "page_first":
            dims = (2, self.size, L, H, D)
        elif self.layout == "page_first_direct":
            dims = (2, self.page_num, L, P, H, D)
        elif self.layout == "page_head":
            dims = (2, self.page_num, H, P, L, D)
        else:
            raise ValueError(f"Unsupported layout: {self.layout}")
        self.token_stride_size = H * D * _itemsize(self.dtype)
        self.layout_dim = self.token_stride_size * L
        return torch.zeros(dims, dtype=self.dtype, device=self.device)

    @property
    def k_buffer(self):
        return self.kv_buffer[0]

    @property
    def v_buffer(self):
        return self.kv_buffer[1]

    def get_hybrid_pool_buffer(self):
        return [self.k_buffer, self.v_buffer]

    def _page_view(self, index):
        i = int(index)
        if self.layout == "layer_first":
            return self.kv_buffer[:, :, i : i + self.page_size]
        if self.layout == "page_first":
            return self.kv_buffer[:, i : i + self.page_size]
        if self.layout in ("page_first_direct", "page_head"):
            p = i // self.page_size
            return self.kv_buffer[:, p : p + 1]
        raise ValueError(f"Unsupported layout: {self.layout}")

    def get_data_page(self, index, flat: bool = True) -> torch.Tensor:
        page = self._page_view(index)
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros(
            (2, self.layer_num, self.page_size, self.head_num, self.head_dim),
            dtype=self.dtype, device=self.device,
        ).flatten()

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        view = self._page_view(index)
        view.copy_(data_page.reshape(view.shape))

    def get_page_buffer_meta(self, indices) -> Tuple[List[int], List[int]]:
        """(ptr_list, size_list) for zero-copy IO, all byte addresses/sizes.
        page_first / page_first_direct / page_head: per page [k_ptr, v_ptr], each
          layer_num*page_size*head_num*head_dim*itemsize bytes (whole page, all layers).
        layer_first: per page, per layer [k_ptr, v_ptr], each page_size*head_num*head_dim*
          itemsize bytes (2*layer_num entries per page)."""
        assert len(indices) % self.page_size == 0
        idx = indices.tolist() if hasattr(indices, "tolist") else list(indices)
        item = _itemsize(self.dtype)
        base = self.kv_buffer.data_ptr()
        tok = self.head_num * self.head_dim * item
        v_off = self.layer_num * self.size * tok
        ptrs: List[int] = []
        if self.layout == "layer_first":
            for j in range(0, len(idx), self.page_size):
                for layer in range(self.layer_num):
                    k = base + idx[j] * tok + layer * self.size * tok
                    ptrs += [k, k + v_off]
            size = item * self.page_size * self.head_num * self.head_dim
        elif self.layout in ("page_first", "page_first_direct", "page_head"):
            for j in range(0, len(idx), self.page_size):
                k = base + idx[j] * self.layer_num * tok
                ptrs += [k, k + v_off]
            size = self.layer_num * item * self.page_size * self.head_num * self.head_dim
        else:
            raise ValueError(f"Unsupported layout: {self.layout}")
        return ptrs, [size] * len(ptrs)


class MLATokenToKVPoolHost(HostKVCache):
    def __init__(
        self,
        device_pool,
        host_to_device_ratio: float,
        host_size: int,
        page_size: int,
        layout: str,
        pin_memory: bool = False,
        device: str = "cpu",
        allocator_type: str = "default",
        override_kv_cache_dim: Optional[int] = None,
    ):
        self.override_kv_cache_dim = override_kv_cache_dim
        self.dcp_size = 1
        self.dcp_rank = 0
        super().__init__(device_pool, host_to_device_ratio, host_size, page_size, layout,
                         pin_memory, device, allocator_type)

    def get_size_per_token(self):
        self.kv_lora_rank = self.device_pool.kv_lora_rank
        self.qk_rope_head_dim = self.device_pool.qk_rope_head_dim
        self.layer_num = self.device_pool.layer_num
        self.kv_cache_dim = self.override_kv_cache_dim or (self.kv_lora_rank + self.qk_rope_head_dim)
        self.dsa_kv_cache_store_fp8 = getattr(self.device_pool, "dsa_kv_cache_store_fp8", False)
        size = self.kv_cache_dim * _itemsize(self.dtype) * self.layer_num
        if self.layout == "page_first_kv_split" and self.device_pool.index_head_dim is not None:
            n_idx = self.device_pool.num_indexer_layers or self.layer_num
            size += self.device_pool.index_head_dim * _itemsize(self.dtype) * n_idx
            if getattr(self.device_pool, "index_k_scale_buffer", None) is not None:
                size += 4 * n_idx  # one FP32 scale per token per indexer layer
        return size

    def get_ksize_per_token(self):
        return self.get_size_per_token()

    def init_kv_buffer(self):
        L, C, P = self.layer_num, self.kv_cache_dim, self.page_size
        if self.layout == "layer_first":
            dims = (L, self.size, 1, C)
        elif self.layout == "page_first":
            dims = (self.size, L, 1, C)
        elif self.layout == "page_first_direct":
            dims = (self.page_num, L, P, 1, C)
        elif self.layout == "page_first_kv_split":
            return self._init_kv_split_buffers()
        else:
            raise ValueError(f"Unsupported layout: {self.layout}")
        self.token_stride_size = C * _itemsize(self.dtype)
        self.layout_dim = self.token_stride_size * L
        return torch.zeros(dims, dtype=self.dtype, device=self.device)

    def _init_kv_split_buffers(self):
        """Ascend layout: separate K (latent) and V (rope) buffers, each (page_num, layers,
        page_size, 1, width), plus the optional indexer K (page_num, indexer layers, page_size,
        1, index_head_dim) and its FP32 scale (..., 1); kv_buffer is the K buffer."""
        dev = self.device_pool
        base = (self.page_num, self.layer_num, self.page_size, 1)
        k_width = dev.kv_lora_rank + dev.qk_rope_head_dim if self.dsa_kv_cache_store_fp8 \
            else self.kv_lora_rank
        self.k_buffer = torch.zeros((*base, k_width), dtype=self.dtype)
        self.v_buffer = torch.zeros((*base, self.qk_rope_head_dim), dtype=self.dtype)
        n_idx = dev.num_indexer_layers or self.layer_num
        idx_base = (self.page_num, n_idx, self.page_size, 1)
        self.index_k_buffer = None
        if dev.index_head_dim is not None:
            self.index_k_buffer = torch.zeros((*idx_base, dev.index_head_dim), dtype=self.dtype)
        self.index_k_scale_buffer = None
        if getattr(dev, "index_k_scale_buffer", None) is not None:
            self.index_k_scale_buffer = torch.zeros((*idx_base, 1), dtype=torch.float32)
        self.token_stride_size = self.kv_cache_dim * _itemsize(self.dtype)
        self.layout_dim = self.token_stride_size * self.layer_num
        return self.k_buffer

    def _page_view(self, index):
        i = int(index)
        if self.layout == "layer_first":
            return self.kv_buffer[:, i : i + self.page_size]
        if self.layout == "page_first":
            return self.kv_buffer[i : i + self.page_size]
        if self.layout == "page_first_direct":
            p = i // self.page_size
            return self.kv_buffer[p : p + 1]
        raise ValueError(f"Unsupported layout: {self.layout}")

    def get_data_page(self, index, flat: bool = True) -> torch.Tensor:
        page = self._page_view(index)
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self) -> torch.Tensor:
        return torch.zeros(
            (self.layer_num, self.page_size, 1, self.kv_cache_dim),
            dtype=self.dtype, device=self.device,
        ).flatten()

    def set_from_flat_data_page(self, index: int, data_page: torch.Tensor) -> None:
        view = self._page_view(index)
        view.copy_(data_page.reshape(view.shape))

    def get_page_buffer_meta(self, indices) -> Tuple[List[int], List[int]]:
        """page_first / page_first_direct: ONE ptr per page, layer_num*page_size*
        kv_cache_dim*itemsize bytes. layer_first: per page, one ptr per layer, each
        page_size*kv_cache_dim*itemsize bytes."""
        assert len(indices) % self.page_size == 0
        idx = indices.tolist() if hasattr(indices, "tolist") else list(indices)
        item = _itemsize(self.dtype)
        base = self.kv_buffer.data_ptr()
        tok = self.kv_cache_dim * item
        ptrs: List[int] = []
        if self.layout == "layer_first":
            for j in range(0, len(idx), self.page_size):
                for layer in range(self.layer_num):
                    ptrs.append(base + idx[j] * tok + layer * self.size * tok)
            size = item * self.page_size * self.kv_cache_dim
        elif self.layout in ("page_first", "page_first_direct"):
            for j in range(0, len(idx), self.page_size):
                ptrs.append(base + idx[j] * self.layer_num * tok)
            size = self.layer_num * item * self.page_size * self.kv_cache_dim
        elif self.layout == "page_first_kv_split":
            return self._kv_split_buffer_meta(idx)
        else:
            raise ValueError(f"Unsupported layout: {self.layout}")
        return ptrs, [size] * len(ptrs)


    def _kv_split_buffer_meta(self, idx):
        """Per page [k, v (not for FP8 DSA), index_k?, scale?]; each pointer is the buffer
        base + first token * (that buffer's per-token bytes over its layers)."""
        bufs = [self.k_buffer]
        if not self.dsa_kv_cache_store_fp8:
            bufs.append(self.v_buffer)
        bufs += [b for b in (self.index_k_buffer, self.index_k_scale_buffer) if b is not None]
        # per-token bytes of each buffer: layers * width * itemsize
        per_tok = [b.shape[1] * b.shape[-1] * b.element_size() for b in bufs]
        ptrs: List[int] = []
        sizes: List[int] = []
        for j in range(0, len(idx), self.page_size):
            for b, t in zip(bufs, per_tok):
                ptrs.append(b.data_ptr() + idx[j] * t)
                sizes.append(t * self.page_size)
        return ptrs, sizes


def make_mha_host_pool(
    layout: str = "page_first",
    page_size: int = 4,
    num_pages: int = 16,
    layer_num: int = 2,
    head_num: int = 2,
    head_dim: int = 8,
    dtype: torch.dtype = torch.float16,
) -> MHATokenToKVPoolHost:
    """Host pool with (num_pages + 1) pages (the real sizing adds one page)."""
    dev = FakeMHADevicePool(size=num_pages * page_size, layer_num=layer_num,
                            head_num=head_num, head_dim=head_dim, store_dtype=dtype)
    return MHATokenToKVPoolHost(dev, 1.0, 0, page_size, layout)


def make_mla_host_pool(
    layout: str = "page_first",
    page_size: int = 4,
    num_pages: int = 16,
    layer_num: int = 2,
    kv_lora_rank: int = 16,
    qk_rope_head_dim: int = 8,
    dtype: torch.dtype = torch.bfloat16,
    index_head_dim: Optional[int] = None,
    num_indexer_layers: Optional[int] = None,
    index_k_scale: bool = False,
) -> MLATokenToKVPoolHost:
    dev = FakeMLADevicePool(size=num_pages * page_size, layer_num=layer_num,
                            kv_lora_rank=kv_lora_rank, qk_rope_head_dim=qk_rope_head_dim,
                            store_dtype=dtype, index_head_dim=index_head_dim,
                            num_indexer_layers=num_indexer_layers,
                            index_k_scale_buffer=object() if index_k_scale else None)
    return MLATokenToKVPoolHost(dev, 1.0, 0, page_size, layout)
