"""The tiny engine in several processes over a `tierkv master` + `tierkv store` started on
127.0.0.1: two engines sharing the cluster, disaggregated prefill (kv_producer) and decode
(kv_consumer), a store killed during a load, and the /v1/completions endpoint."""

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
import uuid

import pytest

import tierkv
from conftest import Child, _die_with_parent, tierkv_binary
from engine_util import (EXAMPLES, MAX_TOKENS, embedded_store, engine, kv_config, prompt, same,
                         scratch)
from tiny_engine.__main__ import logits_digest

P = prompt(1, 100)
Q = P[:50] + prompt(2, 40)
PKG = os.path.dirname(os.path.dirname(os.path.abspath(tierkv.__file__)))


def requester(address):
    return {"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
            "global_segment_size": 0, "local_buffer_size": "4MB", "protocol": "auto",
            "master_server_addr": address}


def proc_config(address, role="kv_both", prefix=None):
    cfg = kv_config(role, store=requester(address))
    if prefix is not None:
        cfg["kv_connector_extra_config"]["cache_prefix"] = prefix
    return cfg


def env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join([PKG, EXAMPLES]))


def run_engine(prompts, cfg, max_tokens=MAX_TOKENS):
    """`python3 -m tiny_engine` on the prompts (JSON lines on stdin), one after another."""
    out = subprocess.run(
        [sys.executable, "-m", "tiny_engine", "--prompts", "-", "--sequential",
         "--max-tokens", str(max_tokens), "--block-size", "16", "--threads", "1",
         "--kv-transfer-config", json.dumps(cfg)],
        input="\n".join(json.dumps(p) for p in prompts), capture_output=True, text=True,
        timeout=120, env=env(), cwd=EXAMPLES, preexec_fn=_die_with_parent)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    results = [x for x in lines if "tokens" in x]
    (stats,) = [x["connector_stats"] for x in lines if "connector_stats" in x]
    assert len(results) == len(prompts)
    return results, stats


def matches(result, ref):
    return (result["tokens"] == ref.output_token_ids
            and result["logits_sha256"] == logits_digest(ref))


def test_two_engine_processes_share_one_master_and_store(cluster):
    refs = scratch([P, Q])
    prefix = f"two-{uuid.uuid4().hex[:6]}"
    first, st1 = run_engine([P, Q], proc_config(cluster["address"], prefix=prefix))
    assert [r["external_hit_tokens"] for r in first] == [0, 0]
    assert st1["saved_objects"] == (6 + 2) * 2 and st1["save_errors"] == 0
    second, st2 = run_engine([P, Q], proc_config(cluster["address"], prefix=prefix))
    assert second[0]["external_hit_tokens"] == 96  # computed by the first process
    assert second[1]["local_hit_tokens"] == 48 and second[1]["external_hit_tokens"] == 32
    assert st2["loaded_blocks"] == 8 and st2["load_error_blocks"] == 0
    for res in first + second:
        assert res["load_error_blocks"] == 0
    assert all(matches(r, ref) for r, ref in zip(first + second, refs + refs))


def test_disaggregated_prefill_and_decode(cluster):
    (ref,) = scratch([P], max_tokens=8)
    prefix = f"pd-{uuid.uuid4().hex[:6]}"
    prefill, pst = run_engine([P], proc_config(cluster["address"], "kv_producer", prefix), 1)
    assert pst["saved_objects"] == 12 and pst["loaded_blocks"] == 0
    assert prefill[0]["tokens"] == ref.output_token_ids[:1]
    decode, dst = run_engine([P], proc_config(cluster["address"], "kv_consumer", prefix), 8)
    assert decode[0]["external_hit_tokens"] == 96 and dst["saved_objects"] == 0
    assert matches(decode[0], ref)  # the same tokens and logits as one engine alone


@pytest.fixture
def own_cluster():
    """A master + store of this test only (the test kills the store)."""
    binary = tierkv_binary()
    master = Child([binary, "master", "--host", "127.0.0.1", "--port", "0", "--metrics-port",
                    "-1"], r"tierkv master listening on (\S+)")
    store = Child([binary, "store", "--master", master.match.group(1), "--segment-size",
                   "64MiB", "--small-pages", "--metrics-port", "-1"],
                  r"tierkv store serving segment (\S+)")
    yield {"address": master.match.group(1), "store": store}
    store.kill()
    master.kill()


def test_store_killed_during_a_load_is_recomputed_bitwise(own_cluster):
    (ref,) = scratch([P])
    s = tierkv.DistributedStore()
    assert s.setup(requester(own_cluster["address"])) == 0
    cfg = kv_config()
    e1 = engine(cfg, s)
    (r1,) = e1.generate([P], MAX_TOKENS)
    e1.close()
    assert same(r1, ref) and e1.worker.stats["saved_objects"] == 12
    e2 = engine(cfg, s)

    def kill_store(layer):
        if layer == 1:  # layer 0 is loaded; the store dies before layer 1
            own_cluster["store"].proc.send_signal(signal.SIGKILL)
            own_cluster["store"].proc.wait()

    e2.worker.before_layer_load = kill_store
    (r2,) = e2.generate([P], MAX_TOKENS)
    assert r2.external_hit_tokens == 96
    assert r2.load_error_blocks == 6 and e2.worker.stats["loaded_blocks"] == 0
    assert same(r2, ref)  # recomputed, not decoded from the half-loaded blocks
    e2.close()
    s.close()


def test_completions_endpoint(cluster):
    (ref,) = scratch([P])
    cfg = proc_config(cluster["address"], prefix=f"http-{uuid.uuid4().hex[:6]}")
    srv = subprocess.Popen(
        [sys.executable, "-m", "tiny_engine", "--serve", "--port", "0", "--block-size", "16",
         "--kv-transfer-config", json.dumps(cfg)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env(), cwd=EXAMPLES,
        preexec_fn=_die_with_parent)
    try:
        line = srv.stdout.readline()
        assert "listening on" in line, line
        url = line.split()[-1] + "/v1/completions"

        def post(body):
            req = urllib.request.Request(url, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as resp:
                return json.loads(resp.read())

        first = post({"model": "tiny", "prompt": P, "max_tokens": MAX_TOKENS})
        assert first["object"] == "text_completion"
        assert first["choices"][0]["token_ids"] == ref.output_token_ids
        assert first["usage"] == {"prompt_tokens": 100, "completion_tokens": MAX_TOKENS,
                                  "total_tokens": 100 + MAX_TOKENS}
        again = post({"prompt": P, "max_tokens": MAX_TOKENS, "temperature": 0})
        assert again["choices"][0]["token_ids"] == ref.output_token_ids
        assert again["tierkv"]["local_hit_tokens"] == 96
        text = post({"prompt": "hello tierkv", "max_tokens": 3})
        assert len(text["choices"][0]["token_ids"]) == 3
        with pytest.raises(urllib.error.HTTPError) as err:
            post({"prompt": P, "max_tokens": 2, "temperature": 0.7})
        assert err.value.code == 400
        with pytest.raises(urllib.error.HTTPError) as err:
            post({"prompt": [], "max_tokens": 2})
        assert err.value.code == 400
    finally:
        srv.kill()
        srv.wait()
