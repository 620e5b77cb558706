"""tierkv.integrations.sglang.TierkvHiCacheStorage with hybrid models and the Ascend MLA
layout, through the SGLang test double (tests/python/doubles/sglang): the v2 calls
(register_mem_host_pool_v2, batch_exists_v2, batch_get_v2, batch_set_v2) driven as SGLang's
HybridCacheController drives them (sglang_driver.HybridHiCacheDriver) for KV + Mamba state,
KV + SWA and KV + a KV-derived indexer pool; both pool hit policies; page_first_kv_split; the
fingerprints of side pools and layouts."""

import uuid

import pytest
import torch

from engine_util import STORE_CONF, HeldStore

from sglang.srt.mem_cache.hicache_storage import PoolHitPolicy, PoolName, PoolTransfer
from sglang.srt.mem_cache.memory_pool_host import make_mha_host_pool, make_mla_host_pool
from sglang.srt.mem_cache.pool_host import HostPoolGroup, PoolEntry
from sglang.srt.mem_cache.pool_host.mamba import make_mamba_host_pool
from sglang_driver import HybridHiCacheDriver as _Hybrid
from sglang_driver import HiCacheDriver as _Driver
from sglang_driver import page_hashes

_OPEN = []


def _track(d):
    _OPEN.append(d.backend)
    return d


def Hybrid(*args, **kw):
    return _track(_Hybrid(*args, **kw))


def Driver(*args, **kw):
    return _track(_Driver(*args, **kw))


@pytest.fixture(autouse=True)
def _close_backends():
    yield
    while _OPEN:
        _OPEN.pop().close()


P = 4
N = 10
TOKENS = list(range(3000, 3000 + N * P + 1))
KEYS = page_hashes(TOKENS, P)
TRAILING, ALL = PoolHitPolicy.TRAILING_PAGES, PoolHitPolicy.ALL_PAGES


def _extra(v1=True):
    e = {"backend_name": "tierkv", "module_path": "tierkv.integrations.sglang",
         "class_name": "TierkvHiCacheStorage", "store": dict(STORE_CONF),
         "cache_prefix": f"h{uuid.uuid4().hex[:8]}"}
    if v1:
        e["interface_v1"] = 1
    return e


def _fill(tensors, seed):
    g = torch.Generator().manual_seed(seed)
    for t in tensors:
        t.copy_(torch.randn(t.shape, generator=g).to(t.dtype))


def _group(kv, **side):
    entries = [PoolEntry(PoolName.KV, kv, is_primary_index_anchor=True)]
    entries += [PoolEntry(PoolName(name), pool) for name, pool in side.items()]
    return HostPoolGroup(entries)


def _kv_pages(pool, idx):
    return [pool.get_data_page(int(idx[i * P])).clone() for i in range(len(idx) // P)]


def _same(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _mamba(**kw):
    m = make_mamba_host_pool(**kw)
    _fill(m.get_hybrid_pool_buffer(), 11)
    return m


@pytest.mark.parametrize("v1, layout, groups", [(True, "page_first", False),
                                                (True, "layer_first", False),
                                                (False, "page_first", False),
                                                (True, "page_first_direct", True)])
def test_kv_and_mamba_state_backup_then_prefetch_into_other_pools_byte_identical(
        v1, layout, groups):
    with HeldStore():
        extra = _extra(v1)
        if groups:
            extra["enable_group_semantics"] = True
        kv_a, m_a = make_mha_host_pool(layout=layout, page_size=P, num_pages=32), _mamba()
        _fill([kv_a.kv_buffer], 1)
        a = Hybrid(_group(kv_a, mamba=m_a), extra_config=extra, model_name="org/hybrid")
        idx, slot = kv_a.alloc(N * P), m_a.alloc(1)
        state = PoolTransfer(name=PoolName.MAMBA, host_indices=slot, keys=[KEYS[-1]],
                             hit_policy=TRAILING)
        assert a.backup(TOKENS, idx, extra_pools=[state]) == N * P
        assert a.last_pool_hits == {PoolName.MAMBA: 1}

        kv_b, m_b = make_mha_host_pool(layout=layout, page_size=P, num_pages=32), \
            make_mamba_host_pool()
        b = Hybrid(_group(kv_b, mamba=m_b), extra_config=extra, model_name="org/hybrid")
        slot_b = m_b.alloc(1)
        want = PoolTransfer(name=PoolName.MAMBA, host_indices=slot_b, hit_policy=TRAILING)
        res = b.prefetch(TOKENS, extra_pools=[want])
        assert res.exists.kv_hit_pages == N
        assert res.exists.extra_pool_hit_pages == {PoolName.KV: N, PoolName.MAMBA: N}
        assert res.exists.restorable == [N]  # the state exists for the whole prefix only
        assert res.completed_tokens == N * P and res.pool_hits == {PoolName.MAMBA: 1}
        assert want.keys == [KEYS[-1]]  # _sync_trailing_keys: the last hit page's key
        assert _same(_kv_pages(kv_b, res.host_indices), _kv_pages(kv_a, idx))
        assert torch.equal(m_b.get_data_page(int(slot_b[0])), m_a.get_data_page(int(slot[0])))
        # The state's object is SGLang's flat data page of the slot (temporal, then conv).
        st = b.backend
        raw = st.store.get(st._side_key(st.side_pools["mamba"], KEYS[-1])[0])
        assert bytes(raw) == m_a.get_data_page(int(slot[0])).numpy().tobytes()
        # The state of a shorter prefix was never stored: that prefix is not restorable.
        short = b.prefetch(TOKENS[:6 * P], extra_pools=[PoolTransfer(
            name=PoolName.MAMBA, host_indices=m_b.alloc(1), hit_policy=TRAILING)])
        assert short.exists.kv_hit_pages == 0 and short.completed_tokens == 0
        # Without side pools the KV pages alone are a hit.
        assert b.prefetch(TOKENS[:6 * P]).completed_tokens == 6 * P
        # A KV transfer in the v2 calls reads the KV pages under their bare keys; host indices
        # that do not cover the pages fail those pages.
        two = kv_b.alloc(2 * P)
        kv_t = PoolTransfer(name=PoolName.KV, host_indices=two, keys=KEYS[:2])
        assert st.batch_get_v2([kv_t]) == {PoolName.KV: [True, True]}
        assert _same(_kv_pages(kv_b, two), _kv_pages(kv_a, idx)[:2])
        assert st.batch_get_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=slot_b,
                                             keys=KEYS[:2])]) == {PoolName.MAMBA: [False] * 2}


def test_kv_and_swa_window_round_trip_and_a_missing_window_page():
    with HeldStore():
        extra, W = _extra(), 3
        kv_a, swa_a = (make_mha_host_pool(page_size=P, num_pages=32),
                       make_mha_host_pool(page_size=P, num_pages=8, head_dim=4))
        _fill([kv_a.kv_buffer, swa_a.kv_buffer], 2)
        a = Hybrid(_group(kv_a, swa=swa_a), extra_config=extra, model_name="m")
        idx, win = kv_a.alloc(N * P), swa_a.alloc(W * P)
        t = PoolTransfer(name=PoolName.SWA, host_indices=win, keys=KEYS[-W:], hit_policy=TRAILING)
        assert a.backup(TOKENS, idx, extra_pools=[t]) == N * P

        kv_b, swa_b = (make_mha_host_pool(page_size=P, num_pages=32),
                       make_mha_host_pool(page_size=P, num_pages=8, head_dim=4))
        b = Hybrid(_group(kv_b, swa=swa_b), extra_config=extra, model_name="m")
        win_b = swa_b.alloc(W * P)
        res = b.prefetch(TOKENS, extra_pools=[PoolTransfer(
            name=PoolName.SWA, host_indices=win_b, keys=["?"] * W, hit_policy=TRAILING)])
        assert res.exists.kv_hit_pages == N and res.exists.restorable == [N]
        assert res.completed_tokens == N * P and res.pool_hits == {PoolName.SWA: W}
        assert _same(_kv_pages(swa_b, win_b), _kv_pages(swa_a, win))
        # A window page missing (page 9 of the 3-page window ending at page 10): no prefix
        # ending at pages 9 or 10 is restorable; the longest one is 8 (window 6..8 stored).
        kv_c, swa_c = (make_mha_host_pool(page_size=P, num_pages=32),
                       make_mha_host_pool(page_size=P, num_pages=8, head_dim=4))
        c = Hybrid(_group(kv_c, swa=swa_c), extra_config=_extra(), model_name="m")
        assert c.backup(TOKENS, kv_c.alloc(N * P)) == N * P
        win = swa_c.alloc(W * P)
        for keys in [KEYS[end - W:end] for end in range(W, 9)] + [KEYS[N - 1:]]:
            # windows ending at pages 3..8 (pages 1..8), then page 10 alone
            assert c.backend.batch_set_v2([PoolTransfer(
                name=PoolName.SWA, host_indices=win[:len(keys) * P], keys=keys)]) \
                == {PoolName.SWA: [True] * len(keys)}
        r = c.backend.batch_exists_v2(KEYS, [PoolTransfer(name=PoolName.SWA, keys=["?"] * W,
                                                          hit_policy=TRAILING)])
        assert r.kv_hit_pages == 8 and r.extra_pool_hit_pages[PoolName.SWA] == 8
        assert r.restorable == [1, 2, 3, 4, 5, 6, 7, 8]


def test_batch_exists_v2_counts_with_both_hit_policies():
    with HeldStore():
        kv = make_mha_host_pool(page_size=P, num_pages=32)
        m, idxr = _mamba(), make_mla_host_pool(page_size=P, num_pages=32)
        _fill([kv.kv_buffer, idxr.kv_buffer], 3)
        d = Hybrid(_group(kv, mamba=m, indexer=idxr), extra_config=_extra(), model_name="m")
        st, kv_idx = d.backend, kv.alloc(N * P)
        assert d.backup(TOKENS, kv_idx) == N * P
        slot = m.alloc(1)
        for page in (6, 10):  # the state after pages 6 and 10
            assert st.batch_set_v2([PoolTransfer(name=PoolName.MAMBA, host_indices=slot,
                                                 keys=[KEYS[page - 1]])]) \
                == {PoolName.MAMBA: [True]}
        # Indexer pages 1..7 stored, page 8 missing, 9..10 stored.
        ix = idxr.alloc(N * P)
        keep = [i for i in range(N) if i != 7]
        assert st.batch_set_v2([PoolTransfer(
            name=PoolName.INDEXER, host_indices=torch.cat([ix[i * P:(i + 1) * P] for i in keep]),
            keys=[KEYS[i] for i in keep])]) == {PoolName.INDEXER: [True] * 9}

        def ask(*transfers, keys=KEYS):
            return st.batch_exists_v2(keys, list(transfers))

        def state(policy, n=None):
            return PoolTransfer(name=PoolName.MAMBA, keys=None if n is None else ["?"] * n,
                                hit_policy=policy)

        r = ask(state(TRAILING))
        assert (r.kv_hit_pages, r.restorable) == (10, [6, 10])
        assert r.extra_pool_hit_pages == {PoolName.KV: 10, PoolName.MAMBA: 10}
        r = ask(state(TRAILING), keys=KEYS[:8])  # ends at page 8: the state after 6 serves
        assert (r.kv_hit_pages, r.restorable) == (6, [6])
        r = ask(state(ALL))  # page 1 has no state
        assert (r.kv_hit_pages, r.restorable, r.extra_pool_hit_pages) == (0, [], {PoolName.KV: 10})
        r = ask(state(TRAILING, 2))  # windows of 2 pages: none complete
        assert r.kv_hit_pages == 0 and PoolName.MAMBA not in r.extra_pool_hit_pages
        r = ask(PoolTransfer(name=PoolName.INDEXER, hit_policy=ALL))
        assert (r.kv_hit_pages, r.extra_pool_hit_pages[PoolName.INDEXER]) == (7, 7)
        # Every pool must serve the prefix: {6, 10} and {1..7}.
        r = ask(PoolTransfer(name=PoolName.INDEXER), state(TRAILING))
        assert (r.kv_hit_pages, r.restorable) == (6, [6])
        assert r.extra_pool_hit_pages == {PoolName.KV: 10, PoolName.INDEXER: 7,
                                          PoolName.MAMBA: 10}
        # KV pages bound everything; an unregistered pool is a miss; no keys, no hits.
        r = ask(state(TRAILING), keys=KEYS[:9] + ["not-stored"])
        assert r.kv_hit_pages == 6 and r.extra_pool_hit_pages[PoolName.KV] == 9
        assert ask(PoolTransfer(name=PoolName.SWA)).kv_hit_pages == 0
        assert ask(state(TRAILING), keys=[]).kv_hit_pages == 0
        assert st.batch_get_v2([PoolTransfer(name=PoolName.SWA, host_indices=ix[:P],
                                             keys=[KEYS[0]])]) == {PoolName.SWA: [False]}


def test_mla_kv_with_kv_derived_indexer_and_mamba_across_tp_ranks():
    """The indexer pool rides on the KV host indices (indices_from_pool=KV): one copy for all
    TP ranks like the MLA KV, written by rank 0; the Mamba state is per rank, and rank 1
    writes its own even though it skips the KV backup."""
    with HeldStore():
        extra = _extra()

        def rank(r, seed=None):
            kv, ix, m = (make_mla_host_pool(page_size=P, num_pages=32),
                         make_mla_host_pool(page_size=P, num_pages=32, kv_lora_rank=8),
                         make_mamba_host_pool())
            if seed is not None:
                _fill([kv.kv_buffer, ix.kv_buffer, *m.get_hybrid_pool_buffer()], seed + r)
            return kv, ix, m, Hybrid(_group(kv, indexer=ix, mamba=m), extra_config=extra,
                                     model_name="mla", tp_rank=r, tp_size=2)

        def pools(m, slot, keys=None):
            return [PoolTransfer(name=PoolName.INDEXER, indices_from_pool=PoolName.KV),
                    PoolTransfer(name=PoolName.MAMBA, host_indices=slot, keys=keys,
                                 hit_policy=TRAILING)]

        written = []
        for r in (0, 1):
            kv, ix, m, d = rank(r, seed=20)
            idx, slot = kv.alloc(N * P), m.alloc(1)
            assert d.backup(TOKENS, idx, extra_pools=pools(m, slot, [KEYS[-1]])) == N * P
            written.append((kv, ix, m, idx, slot))
        for r in (0, 1):
            kv, ix, m, d = rank(r)
            slot = m.alloc(1)
            res = d.prefetch(TOKENS, extra_pools=pools(m, slot))
            assert res.completed_tokens == N * P and res.pool_hits == {PoolName.MAMBA: 1}
            kv0, ix0, _, idx0, _ = written[0]  # rank 0's one copy of KV and indexer
            assert _same(_kv_pages(kv, res.host_indices), _kv_pages(kv0, idx0))
            assert _same(_kv_pages(ix, res.host_indices), _kv_pages(ix0, idx0))
            _, _, m_r, _, slot_r = written[r]  # this rank's own state
            assert torch.equal(m.get_data_page(int(slot[0])), m_r.get_data_page(int(slot_r[0])))
        # A missing indexer page (5): only the 4 pages before it are restorable, and then no
        # prefix ending at page 10 (where the state is) is.
        kv, ix, m = (make_mla_host_pool(page_size=P, num_pages=32),
                     make_mla_host_pool(page_size=P, num_pages=32, kv_lora_rank=8),
                     make_mamba_host_pool())
        d = Hybrid(_group(kv, indexer=ix, mamba=m), extra_config=_extra(), model_name="mla")
        idx, slot = kv.alloc(N * P), m.alloc(1)
        assert d.backup(TOKENS, idx, extra_pools=pools(m, slot, [KEYS[-1]])[1:]) == N * P
        keep = [i for i in range(N) if i != 4]
        assert d.backend.batch_set_v2([PoolTransfer(
            name=PoolName.INDEXER, host_indices=torch.cat([idx[i * P:(i + 1) * P] for i in keep]),
            keys=[KEYS[i] for i in keep])]) == {PoolName.INDEXER: [True] * (N - 1)}
        res = d.prefetch(TOKENS, extra_pools=pools(m, m.alloc(1))[:1])
        assert res.exists.kv_hit_pages == 4 and res.completed_tokens == 4 * P
        assert d.prefetch(TOKENS, extra_pools=pools(m, m.alloc(1))).completed_tokens == 0
        # Rank 1 asked to write the one-copy indexer pool reports success and writes nothing.
        kv1, ix1 = (make_mla_host_pool(page_size=P, num_pages=32),
                    make_mla_host_pool(page_size=P, num_pages=32, kv_lora_rank=8))
        d1 = Hybrid(_group(kv1, indexer=ix1), extra_config=_extra(), model_name="mla",
                    tp_rank=1, tp_size=2)
        st1 = d1.backend
        assert st1.batch_set_v2([PoolTransfer(name=PoolName.INDEXER, host_indices=kv1.alloc(
            N * P), keys=KEYS)]) == {PoolName.INDEXER: [True] * N}
        side = st1.side_pools["indexer"]
        assert not any(f == 1 for f in st1.store.batch_is_exist(
            [st1._side_key(side, k)[0] for k in KEYS]))


@pytest.mark.parametrize("indexer", ["none", "indexer", "indexer+scale"])
def test_page_first_kv_split_mla_round_trip(indexer):
    kw = {} if indexer == "none" else {"index_head_dim": 8, "num_indexer_layers": 1,
                                       "index_k_scale": indexer == "indexer+scale"}
    with HeldStore():
        extra = _extra()
        a = make_mla_host_pool(layout="page_first_kv_split", page_size=P, num_pages=32, **kw)
        bufs = [b for b in (a.k_buffer, a.v_buffer, getattr(a, "index_k_buffer", None),
                            getattr(a, "index_k_scale_buffer", None)) if b is not None]
        _fill(bufs, 5)
        da = Driver(a, extra_config=extra, model_name="m")
        idx = a.alloc(N * P)
        assert da.backup(TOKENS, idx) == N * P
        b = make_mla_host_pool(layout="page_first_kv_split", page_size=P, num_pages=32, **kw)
        res = Driver(b, extra_config=extra, model_name="m").prefetch(TOKENS)
        assert res.completed_tokens == N * P
        names = ["k_buffer", "v_buffer", "index_k_buffer", "index_k_scale_buffer"]
        for name in names[:len(bufs)]:
            src, dst = getattr(a, name), getattr(b, name)
            for i in range(N):
                assert torch.equal(dst[int(res.host_indices[i * P]) // P],
                                   src[int(idx[i * P]) // P]), (name, i)
        # The flat-page path has no pages for this layout (SGLang's get_data_page raises):
        # the backend says so instead of storing or reading other bytes.
        st = da.backend
        assert st.batch_set(["x"], [torch.zeros(8)]) is False
        assert st.batch_get(["x"], [torch.zeros(8)]) == [None]


def test_mha_pools_have_no_page_first_kv_split():
    """SGLang's MHA host pool has no page_first_kv_split (Ascend MHA uses page_first_direct,
    tested in test_sglang_backend); an MHA pool claiming it is refused by name."""
    from sglang_driver import make_storage_config
    from tierkv.integrations.sglang import TierkvHiCacheStorage
    pool = make_mha_host_pool(page_size=P)
    pool.layout = "page_first_kv_split"
    with HeldStore():
        st = TierkvHiCacheStorage(make_storage_config(pool, extra_config=_extra(),
                                                      model_name="m"), {})
        try:
            with pytest.raises(ValueError, match="'page_first_kv_split' is not supported by "
                                                 "tierkv for MHA"):
                st.register_mem_pool_host(pool)
        finally:
            st.close()


@pytest.mark.parametrize("change", ["mamba_shape", "mamba_dtype", "mamba_layout", "swa_heads",
                                    "kv_split_indexer", "kv_split_vs_page_first_direct"])
def test_a_pool_or_layout_change_misses(change):
    with HeldStore():
        extra = _extra()
        if change.startswith("kv_split"):
            a = make_mla_host_pool(layout="page_first_kv_split", page_size=P, num_pages=32)
            _fill([a.k_buffer, a.v_buffer], 6)
            Driver(a, extra_config=extra, model_name="m").backup(TOKENS, a.alloc(N * P))
            if change == "kv_split_indexer":
                b = make_mla_host_pool(layout="page_first_kv_split", page_size=P, num_pages=32,
                                       index_head_dim=8)
            else:
                b = make_mla_host_pool(layout="page_first_direct", page_size=P, num_pages=32)
            assert Driver(b, extra_config=extra, model_name="m").query_hits(TOKENS)[1] == 0
            return
        side_a = {"mamba": _mamba()} if change.startswith("mamba") else \
            {"swa": make_mha_host_pool(page_size=P, num_pages=8)}
        kv_a = make_mha_host_pool(page_size=P, num_pages=32)
        a = Hybrid(_group(kv_a, **side_a), extra_config=extra, model_name="m")
        name = next(iter(side_a))
        pn = PoolName(name)
        n = 1 if name == "mamba" else P
        slot = side_a[name].alloc(n)
        assert a.backup(TOKENS, kv_a.alloc(N * P), extra_pools=[PoolTransfer(
            name=pn, host_indices=slot, keys=[KEYS[-1]], hit_policy=TRAILING)]) == N * P
        if change == "mamba_shape":
            side_b = make_mamba_host_pool(conv_shapes=[(3, 5)])
        elif change == "mamba_dtype":
            side_b = make_mamba_host_pool(temporal_dtype=torch.bfloat16)
        elif change == "mamba_layout":
            side_b = make_mamba_host_pool(layout="page_first_direct")
        else:
            side_b = make_mha_host_pool(page_size=P, num_pages=8, head_num=4)
        b = Hybrid(_group(make_mha_host_pool(page_size=P, num_pages=32), **{name: side_b}),
                   extra_config=extra, model_name="m")
        r = b.backend.batch_exists_v2(KEYS, [PoolTransfer(name=pn, hit_policy=TRAILING)])
        assert b.backend.batch_exists(KEYS) == N  # the KV pages are the same
        assert r.kv_hit_pages == 0 and pn not in r.extra_pool_hit_pages
        # The same pool shape does hit (the check above can fail).
        same = make_mamba_host_pool() if name == "mamba" else make_mha_host_pool(
            page_size=P, num_pages=8)
        c = Hybrid(_group(make_mha_host_pool(page_size=P, num_pages=32), **{name: same}),
                   extra_config=extra, model_name="m")
        assert c.backend.batch_exists_v2(KEYS, [PoolTransfer(
            name=pn, hit_policy=TRAILING)]).kv_hit_pages == N
