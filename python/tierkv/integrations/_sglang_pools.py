"""Where a page's bytes lie in SGLang's HiCache host pools (the ``sglang`` integration).

A page of a pool is one tierkv object, read and written zero-copy as a list of byte runs of the
pool's buffers:

* KV-like pools (MHA/MLA, also as SWA or draft side pools): the runs of the page in the order of
  SGLang's flat data page (``get_data_page``), so the flat-tensor path reads the same objects.
  The Ascend MLA layout ``page_first_kv_split`` keeps K (latent), V (rope) and the optional
  indexer K and its FP32 scale in separate buffers: its object is those page slabs one after the
  other, in the order of the pool's ``get_page_buffer_meta`` (V left out for FP8 DSA pools).
* Any other pool (Mamba state, DSA indexer, ...): the runs ``get_page_buffer_meta`` gives for the
  page (Mamba: temporal state, then each conv state), concatenated.

Nothing here imports SGLang: the pools are read by duck typing.
"""

import torch

from . import _common

#: Pool names (SGLang's ``PoolName`` values) whose pages are the same on every TP rank: one copy,
#: written by TP rank 0, read by all (as Mooncake's store keys them).
REPLICATED_POOLS = {"indexer", "draft_indexer", "deepseek_v4_c4", "deepseek_v4_c4_indexer",
                    "deepseek_v4_c4_indexer_scale", "deepseek_v4_c128", "deepseek_v4_c4_state",
                    "deepseek_v4_c4_indexer_state", "deepseek_v4_c128_state"}
#: Pools that hold a KV pool of their own: replicated when that pool is MLA.
KV_LIKE_POOLS = {"swa", "draft", "draft_swa"}


def pool_name(name):
    """The string of a ``PoolName`` (or of a plain string)."""
    return str(getattr(name, "value", name))


def runs(view):
    """The contiguous byte runs of a tensor view, in its logical order (adjacent runs
    merged)."""
    if view.is_contiguous():
        return [[view.data_ptr(), view.numel() * view.element_size()]]
    out = []
    for i in range(view.shape[0]):
        for ptr, n in runs(view[i]):
            if out and out[-1][0] + out[-1][1] == ptr:
                out[-1][1] += n
            else:
                out.append([ptr, n])
    return out


# The page starting at host token t in each layout, as SGLang's get_data_page views it: the
# object holds exactly the bytes of the flat data page (K then V for MHA), so the zero-copy and
# the flat-tensor paths read each other's objects.
_MHA_PAGE = {
    "layer_first": lambda b, t, p: b[:, :, t:t + p],
    "page_first": lambda b, t, p: b[:, t:t + p],
    "page_first_direct": lambda b, t, p: b[:, t // p],
    "page_head": lambda b, t, p: b[:, t // p],
}
_MLA_PAGE = {
    "layer_first": lambda b, t, p: b[:, t:t + p],
    "page_first": lambda b, t, p: b[t:t + p],
    "page_first_direct": lambda b, t, p: b[t // p],
}
KV_SPLIT = "page_first_kv_split"


def _bytes(t):
    return t.numel() * t.element_size()


def _buffers_of(pool):
    """The host tensors of a pool (for registration with the store), without duplicates."""
    get = getattr(pool, "get_hybrid_pool_buffer", None)
    bufs = list(get()) if get is not None else []
    kv = getattr(pool, "kv_buffer", None)
    if not bufs:
        bufs = list(kv) if isinstance(kv, (list, tuple)) else [kv]
    out, seen = [], set()
    for b in bufs:
        if isinstance(b, torch.Tensor) and b.numel() > 0 and b.data_ptr() not in seen:
            seen.add(b.data_ptr())
            out.append(b)
    return out


class PagePieces:
    """Where each page's bytes lie in a KV host pool (MHA or MLA), for its layout."""

    def __init__(self, pool, is_mla):
        self.layout = str(getattr(pool, "layout", "layer_first"))
        self.page_size = int(pool.page_size)
        self.flat_compatible = True
        if self.layout == KV_SPLIT and is_mla:
            parts = [pool.k_buffer]
            if not getattr(pool, "dsa_kv_cache_store_fp8", False):
                parts.append(pool.v_buffer)
            for extra in ("index_k_buffer", "index_k_scale_buffer"):
                if getattr(pool, extra, None) is not None:
                    parts.append(getattr(pool, extra))
            self.buffers = parts
            # Each buffer is (page_num, layers, page_size, 1, width): a page is one slab of each.
            self._views = lambda t: [b[t // self.page_size] for b in parts]
            # The flat data page interleaves latent and rope per token; this object does not.
            self.flat_compatible = False
        else:
            table = _MLA_PAGE if is_mla else _MHA_PAGE
            if self.layout not in table:
                known = sorted(table) + ([KV_SPLIT] if is_mla else [])
                raise ValueError(f"host KV pool layout {self.layout!r} is not supported by "
                                 f"tierkv for {'MLA' if is_mla else 'MHA'} models ({known})")
            buf, page = pool.kv_buffer, table[self.layout]
            self.buffers = [buf]
            self._views = lambda t: [page(buf, t, self.page_size)]
        first = self._views(0)
        self.object_bytes = sum(_bytes(v) for v in first)
        # The fingerprint's page shape: one shape for the single-buffer layouts (as before),
        # the shape and dtype of each component for the split layout.
        if len(first) == 1 and self.flat_compatible:
            self.page_shape = list(first[0].shape)
        else:
            self.page_shape = [[list(v.shape), _common.dtype_name(v.dtype)] for v in first]

    def pieces(self, token_index):
        """(pointers, sizes) of the page starting at host token ``token_index``."""
        out = []
        for v in self._views(token_index):
            for r in runs(v):
                if out and out[-1][0] + out[-1][1] == r[0]:
                    out[-1][1] += r[1]
                else:
                    out.append(list(r))
        return [r[0] for r in out], [r[1] for r in out]


class MetaPieces:
    """A pool read through its ``get_page_buffer_meta`` (Mamba state, indexer and other side
    pools): a page's object is its runs in that order."""

    def __init__(self, pool):
        self.pool = pool
        self.layout = str(getattr(pool, "layout", ""))
        self.page_size = int(getattr(pool, "page_size", 1) or 1)
        self.buffers = _buffers_of(pool)
        self.flat_compatible = False
        ptrs, sizes = pool.get_page_buffer_meta(torch.arange(self.page_size, dtype=torch.int64))
        self.per_page = len(ptrs)
        if self.per_page == 0:
            raise ValueError(f"host pool {type(pool).__name__}: no buffers per page")
        self.object_bytes = int(sum(sizes))
        self.page_shape = [int(s) for s in sizes]

    def pieces(self, token_index):
        idx = torch.arange(token_index, token_index + self.page_size, dtype=torch.int64)
        ptrs, sizes = self.pool.get_page_buffer_meta(idx)
        return [int(p) for p in ptrs], [int(s) for s in sizes]


def is_kv_like(pool):
    """An MHA or MLA token-to-KV host pool (as opposed to a state or indexer pool)."""
    return getattr(pool, "kv_buffer", None) is not None and (
        hasattr(pool, "kv_cache_dim") or hasattr(pool, "head_num"))


def is_mla_pool(pool):
    return hasattr(pool, "kv_cache_dim")


def pieces_for(pool):
    """The piece map of a side pool registered through ``register_mem_host_pool_v2``."""
    if is_kv_like(pool):
        return PagePieces(pool, is_mla_pool(pool))
    if not hasattr(pool, "get_page_buffer_meta"):
        raise ValueError(f"host pool {type(pool).__name__} has no get_page_buffer_meta: "
                         "tierkv cannot address its pages")
    return MetaPieces(pool)


def replicated(name, pool, model_is_mla):
    """Whether a side pool's pages are the same on every TP rank (one copy, TP rank 0 writes)."""
    if name in REPLICATED_POOLS:
        return True
    if name == "swa":
        return bool(model_is_mla)
    if name in KV_LIKE_POOLS:
        return is_mla_pool(pool)
    return False  # Mamba state and unknown pools: each rank its own copy


def pool_dtypes(pool, pieces):
    """The dtypes a pool's page bytes are made of (for the fingerprint)."""
    seen = []
    for b in pieces.buffers:
        name = _common.dtype_name(b.dtype)
        if name not in seen:
            seen.append(name)
    return seen
