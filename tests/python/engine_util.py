"""Helpers of the engine tests (test_engine*.py): the tiny engine from examples/, small model
settings, stores, and the bitwise comparison of two runs."""

import os
import random
import sys
import time
import uuid

import torch

import tierkv

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(REPO, "examples")
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)

from tiny_engine import Engine, ModelConfig  # noqa: E402

BS = 16
MAX_TOKENS = 5


def prompt(seed, n, vocab=512):
    rnd = random.Random(seed)
    return [rnd.randrange(vocab) for _ in range(n)]


def kv_config(role="kv_both", **extra):
    e = {"chunk_size": BS, "load_async": False, "cache_prefix": f"t{uuid.uuid4().hex[:8]}"}
    e.update(extra)
    return {"kv_connector": "TierkvConnector", "kv_role": role, "kv_connector_extra_config": e}


def embedded_store(segment="64MB", **extra):
    s = tierkv.DistributedStore()
    conf = {"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
            "global_segment_size": segment, "local_buffer_size": "4MB", "protocol": "tcp",
            "master_server_addr": ""}
    conf.update(extra)
    rc = s.setup(conf)
    assert rc == 0, f"setup failed: {tierkv.strerror(rc)} {s.last_error()}"
    return s


def engine(config=None, store=None, num_blocks=64, model=None):
    return Engine(model or ModelConfig(), num_blocks=num_blocks, block_size=BS,
                  kv_transfer_config=config, store=store, threads=1)


def scratch(prompts, max_tokens=MAX_TOKENS, model=None):
    """The reference: a fresh engine without tierkv, one prompt at a time, no local hits."""
    out = []
    for p in prompts:
        e = engine(model=model)
        out.append(e.generate([p], max_tokens)[0])
    return out


def same(a, b):
    """Tokens equal and every sampled step's float32 logits bitwise equal."""
    return (a.output_token_ids == b.output_token_ids and len(a.logits) == len(b.logits)
            and all(torch.equal(x, y) and x.dtype == y.dtype for x, y in zip(a.logits, b.logits)))


# ---- the tiny engine through tierkv.integrations.vllm (test_vllm_engine.py) -------------------

STORE_CONF = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
              "global_segment_size": "64MB", "local_buffer_size": "4MB", "protocol": "tcp",
              "master_server_address": ""}


def vllm_kv_config(role="kv_both", store=None, **extra):
    """A --kv-transfer-config for tierkv's vLLM integration (each test its own prefix)."""
    e = {"load_async": False, "cache_prefix": f"v{uuid.uuid4().hex[:8]}",
         "store": dict(store or STORE_CONF), "staging_buffer_size": 8 << 20}
    e.update(extra)
    return {"kv_connector": "TierkvConnector",
            "kv_connector_module_path": "tierkv.integrations.vllm", "kv_role": role,
            "kv_connector_extra_config": e}


class HeldStore:
    """Holds the process's shared store of a setup config for a test (engines come and go;
    the objects stay), and closes it with its last user."""

    def __init__(self, conf=None):
        from tierkv.integrations import _common
        self._common = _common
        setup, _ = _common.store_setup_config(dict(conf or STORE_CONF))
        self.store = _common.shared_store(setup)

    def __enter__(self):
        return self.store

    def __exit__(self, *exc):
        self._common.release_store(self.store)


def push_to_disk(store, keys):
    """Fills DRAM with 256 KiB fillers until every key has only disk replicas."""
    import numpy as np
    import pytest
    filler = np.random.default_rng(0).integers(0, 255, size=256 << 10, dtype=np.uint8).tobytes()
    i, tag = 0, uuid.uuid4().hex[:8]
    for _ in range(20):
        for _ in range(16):
            assert store.put(f"filler-{tag}-{i}", filler) == 0
            i += 1
        time.sleep(0.3)
        descs = store.batch_get_replica_desc(keys)
        if all(descs.get(k) and all(d.is_disk_replica() for d in descs[k]) for k in keys):
            return
    pytest.fail("the engine's blocks never moved to the SSD tier")
