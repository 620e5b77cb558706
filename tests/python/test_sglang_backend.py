"""tierkv.integrations.sglang.TierkvHiCacheStorage through the SGLang test double
(tests/python/doubles/sglang: HiCacheStorage, the dynamic backend factory, the host KV pools
and a driver with HiCacheController's backup/prefetch sequence and page hashes): every host
pool layout, MHA and MLA, zero-copy (interface_v1) and flat-page paths reading each other's
objects, one MLA copy for all TP ranks, ranks apart for MHA, the layout fingerprint, clear,
strict config."""

import uuid

import pytest
import torch

from engine_util import STORE_CONF, HeldStore

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage
from sglang.srt.mem_cache.memory_pool_host import make_mha_host_pool, make_mla_host_pool
from sglang_driver import HiCacheDriver as _Driver
from sglang_driver import page_hashes

_OPEN = []


def HiCacheDriver(*args, **kw):
    """The driver, its backend closed at the test's end (its pool registration goes)."""
    d = _Driver(*args, **kw)
    _OPEN.append(d.backend)
    return d


@pytest.fixture(autouse=True)
def _close_backends():
    yield
    while _OPEN:
        _OPEN.pop().close()


P = 4
TOKENS = list(range(1000, 1000 + 10 * P + 2))  # 10 full pages


def _extra(v1=True, **kw):
    e = {"backend_name": "tierkv", "module_path": "tierkv.integrations.sglang",
         "class_name": "TierkvHiCacheStorage", "store": dict(STORE_CONF),
         "cache_prefix": f"s{uuid.uuid4().hex[:8]}"}
    if v1:
        e["interface_v1"] = 1
    e.update(kw)
    return e


def _pool(mla, layout, dtype=None, page_size=P):
    if mla:
        return make_mla_host_pool(layout=layout, page_size=page_size, num_pages=32,
                                  dtype=dtype or torch.bfloat16)
    return make_mha_host_pool(layout=layout, page_size=page_size, num_pages=32,
                              dtype=dtype or torch.float16)


def _fill(pool, seed):
    g = torch.Generator().manual_seed(seed)
    buf = pool.kv_buffer
    buf.copy_(torch.randn(buf.shape, generator=g).to(buf.dtype))


def _pages(pool, indices):
    return [pool.get_data_page(int(indices[i * pool.page_size])).clone()
            for i in range(len(indices) // pool.page_size)]


def _backup(drv, tokens=TOKENS):
    n = len(page_hashes(tokens, drv.page_size)) * drv.page_size
    idx = drv.mem_pool_host.alloc(n)
    return idx, drv.backup(tokens, idx)


LAYOUTS = [(False, "layer_first"), (False, "page_first"), (False, "page_first_direct"),
           (False, "page_head"), (True, "layer_first"), (True, "page_first"),
           (True, "page_first_direct")]


@pytest.mark.parametrize("mla, layout", LAYOUTS)
def test_backup_then_prefetch_into_another_pool_is_byte_identical(mla, layout):
    with HeldStore():
        extra = _extra()
        a = _pool(mla, layout)
        _fill(a, 1)
        drv_a = HiCacheDriver(a, extra_config=extra, model_name="org/model")
        assert isinstance(drv_a.backend, HiCacheStorage)
        assert type(drv_a.backend).__name__ == "TierkvHiCacheStorage"
        idx_a, done = _backup(drv_a)
        assert done == 10 * P
        want = _pages(a, idx_a)
        b = _pool(mla, layout)
        drv_b = HiCacheDriver(b, extra_config=extra, model_name="org/model")
        res = drv_b.prefetch(TOKENS)
        assert res.storage_hit_tokens == 10 * P and res.completed_tokens == 10 * P
        got = _pages(b, res.host_indices)
        assert all(torch.equal(x, y) for x, y in zip(got, want))
        # A longer prompt sharing the first 6 pages: batch_exists counts from the first.
        other = TOKENS[:6 * P] + list(range(5000, 5000 + 4 * P))
        assert drv_b.query_hits(other)[1] == 6 * P
        assert drv_b.backend.batch_exists(["no-such-page"]) == 0
        # Storing pages already stored counts as stored.
        assert drv_a.backup(TOKENS, idx_a) == 10 * P


@pytest.mark.parametrize("mla, layout", [(False, "page_first"), (False, "layer_first"),
                                         (True, "page_first_direct")])
def test_flat_page_path_and_zero_copy_path_read_each_others_objects(mla, layout):
    with HeldStore():
        extra = _extra()
        a = _pool(mla, layout)
        _fill(a, 2)
        drv_v1 = HiCacheDriver(a, extra_config=extra, model_name="m")
        idx, _ = _backup(drv_v1)
        want = _pages(a, idx)
        b = _pool(mla, layout)
        generic = dict(extra)
        del generic["interface_v1"]
        drv_flat = HiCacheDriver(b, extra_config=generic, model_name="m")
        assert not drv_flat.zero_copy
        res = drv_flat.prefetch(TOKENS)
        assert res.completed_tokens == 10 * P
        assert all(torch.equal(x, y) for x, y in zip(_pages(b, res.host_indices), want))
        # And the other way: flat-page sets read by the zero-copy path.
        c = _pool(mla, layout)
        _fill(c, 3)
        other = list(range(7000, 7000 + 5 * P + 1))
        idx_c = c.alloc(5 * P)
        assert HiCacheDriver(c, extra_config=generic, model_name="m").backup(
            other, idx_c) == 5 * P
        d = _pool(mla, layout)
        res = HiCacheDriver(d, extra_config=extra, model_name="m").prefetch(other)
        assert res.completed_tokens == 5 * P
        assert all(torch.equal(x, y) for x, y in
                   zip(_pages(d, res.host_indices), _pages(c, idx_c)))


def test_get_fills_the_target_and_returns_it_or_none():
    with HeldStore():
        a = _pool(False, "page_first")
        _fill(a, 4)
        drv = HiCacheDriver(a, extra_config=_extra(v1=False), model_name="m")
        idx, _ = _backup(drv)
        keys = page_hashes(TOKENS, P)
        st = drv.backend
        target = a.get_dummy_flat_data_page()
        assert st.get(keys[0], target) is target
        assert torch.equal(target, a.get_data_page(int(idx[0])).flatten())
        assert st.get("missing", a.get_dummy_flat_data_page()) is None
        assert st.exists(keys[1]) and not st.exists("missing")
        assert st.set(keys[1], a.get_data_page(int(idx[P]))) is True  # already stored
        st.clear()
        assert not st.exists(keys[0]) and st.batch_exists(keys) == 0


def test_mla_stores_one_copy_for_every_tp_rank_and_mha_ranks_stay_apart():
    with HeldStore():
        extra = _extra()
        r0 = _pool(True, "page_first")
        _fill(r0, 5)
        d0 = HiCacheDriver(r0, extra_config=extra, model_name="m", tp_rank=0, tp_size=2)
        idx, done = _backup(d0)
        r1 = _pool(True, "page_first")
        d1 = HiCacheDriver(r1, extra_config=extra, model_name="m", tp_rank=1, tp_size=2)
        assert d1.backup(TOKENS, r1.alloc(10 * P)) == 0  # rank 1 skips backup (MLA)
        assert d1.backend.batch_set_v1(["x"], torch.arange(P)) == [True]  # and never writes
        res = d1.prefetch(TOKENS)  # rank 1 reads rank 0's one copy
        assert res.completed_tokens == 10 * P
        assert all(torch.equal(x, y) for x, y in
                   zip(_pages(r1, res.host_indices), _pages(r0, idx)))
        m0 = _pool(False, "page_first")
        _fill(m0, 6)
        HiCacheDriver(m0, extra_config=extra, model_name="m", tp_rank=0, tp_size=2).backup(
            TOKENS, m0.alloc(10 * P))
        m1 = _pool(False, "page_first")
        assert HiCacheDriver(m1, extra_config=extra, model_name="m", tp_rank=1,
                             tp_size=2).query_hits(TOKENS)[1] == 0  # its own heads: a miss


@pytest.mark.parametrize("change", ["dtype", "layout", "page_size", "model"])
def test_another_layout_never_reads_these_pages(change):
    with HeldStore():
        extra = _extra()
        a = _pool(False, "page_first")
        _fill(a, 7)
        _backup(HiCacheDriver(a, extra_config=extra, model_name="m"))
        kw = {"mla": False, "layout": "page_first"}
        model = "m"
        if change == "dtype":
            kw["dtype"] = torch.bfloat16
        elif change == "layout":
            kw["layout"] = "page_first_direct"
        elif change == "page_size":
            kw["page_size"] = 2 * P
        else:
            model = "other-model"
        b = _pool(**kw)
        drv = HiCacheDriver(b, extra_config=extra, model_name=model)
        if change == "page_size":  # the same page keys, asked of 8-token pages
            keys = page_hashes(TOKENS, P)
            assert drv.backend.batch_exists(keys) == 0
        else:
            assert drv.query_hits(TOKENS)[1] == 0


def test_extra_config_is_strict_and_mooncake_keys_are_store_keys():
    with pytest.raises(ValueError, match="unknown key"):
        HiCacheDriver(_pool(False, "page_first"), extra_config=_extra(typo=1), model_name="m")
    with pytest.raises(ValueError, match="cache_prefix"):
        HiCacheDriver(_pool(False, "page_first"), extra_config=_extra(cache_prefix="a@b"),
                      model_name="m")
    with HeldStore():
        drv = HiCacheDriver(_pool(False, "page_first"),
                            extra_config=_extra(protocol="tcp", local_buffer_size="4MB"),
                            model_name="m")
        assert drv.backend.batch_exists(["x"]) == 0
