"""`tierkv bench engine`: the tiny engine's time to first token with and without tierkv.

All in one run, on this machine, against baselines measured beside it:

- one prompt of --tokens + 1 tokens (the cached prefix is --tokens long, a multiple of the
  block size; the last token is always computed to sample from it): TTFT when recomputed,
  when its prefix is reloaded from tierkv's DRAM (an embedded store), when reloaded from the
  SSD tier (the same objects, demoted to disk: only disk replicas left), and with half the
  prefix cached in tierkv (the other half computed while the cached half loads layer-wise),
  against the same request with that half already resident in the engine's own KV pages
  (its local prefix cache: ``ttft_half_ideal_s``);
- the KV bytes per second of each reload (from start_load_kv to the last layer landing)
  against memcpy of the same bytes in the same pieces into the same pages (DRAM) and
  ``fio`` O_DIRECT sequential reads of the object size in the same directory (SSD);
- a replay of the first --trace-requests requests of the conversation trace through the
  engine (tokens made from each request's hash_ids: one hash id = --tokens-per-hash tokens
  drawn from a generator seeded by the id, so equal ids give equal tokens; prompts are scaled
  from 512 tokens per hash id down to that, and capped at the model's context; one output
  token per request; requests one after another, arrival times ignored), with tierkv (an
  embedded store) against the engine's local prefix cache alone: mean and p90 TTFT and
  prefix-hit rates.

The model (examples/tiny_engine) is sized so that prefill is compute-bound (its FLOPs and KV
bytes per token are printed). torch runs on OpenBLAS when Debian's libopenblas0-pthread is
installed (the script re-executes itself with it on LD_LIBRARY_PATH; --blas system keeps the
system's libblas), with --threads intra-op threads.

Output (docs/benchmarks.md): with --json, one JSON line per measurement, then the summary
line {"bench":"engine", "ttft_recompute_s":..., "ttft_dram_s":..., "ttft_ssd_s":...,
"ttft_half_s":..., "ttft_half_ideal_s":..., "speedup_dram":..., "speedup_ssd":...,
"dram_load_ratio":..., "ssd_load_ratio":..., "trace_ttft_mean_s":...,
"trace_ttft_mean_local_only_s":..., ...}; a human summary on stderr with each target as
PASS/FAIL. Exit 1 if an output differs from the recomputed one or a load fails (never for a
missed target).
"""

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

OPENBLAS = "/usr/lib/x86_64-linux-gnu/openblas-pthread"
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(HERE), "examples")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def parse_args():
    p = argparse.ArgumentParser(prog="tierkv bench engine", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="JSON lines on stdout")
    p.add_argument("--tokens", type=int, default=8192, help="cached prefix length")
    p.add_argument("--block-size", type=int, default=256)
    p.add_argument("--model", default='{"vocab_size": 4096, "d_model": 256, "n_layers": 4, '
                   '"n_heads": 4, "n_kv_heads": 2, "d_ff": 704, "max_positions": 16384, '
                   '"name": "tiny-engine/bench-256"}', help="ModelConfig fields (JSON)")
    p.add_argument("--threads", type=int, default=1,
                   help="torch and OpenBLAS threads (spinning BLAS threads on shared cores "
                   "slow everything down)")
    p.add_argument("--blas", choices=["auto", "system"], default="auto")
    p.add_argument("--reps", type=int, default=3,
                   help="pairs of (load, baseline) and of (half, half ideal); medians")
    p.add_argument("--dir", default=None, help="directory of the SSD tier and fio's file "
                   "(default: a new directory under /var/tmp)")
    p.add_argument("--trace", default=os.path.join(os.path.dirname(os.path.dirname(HERE)),
                                                   "shared", "data", "traces",
                                                   "conversation_trace.jsonl"))
    p.add_argument("--trace-requests", type=int, default=500)
    p.add_argument("--tokens-per-hash", type=int, default=16)
    p.add_argument("--trace-block-size", type=int, default=16)
    p.add_argument("--trace-local-blocks", type=int, default=160,
                   help="the trace engine's own KV pages (its local prefix cache)")
    p.add_argument("--tierkv", default=None, help="the tierkv executable (set by the CLI)")
    return p.parse_args()


def maybe_reexec(args):
    if args.blas != "auto" or os.environ.get("TIERKV_BENCH_BLAS"):
        return
    if os.path.exists(os.path.join(OPENBLAS, "libblas.so.3")):
        env = dict(os.environ, TIERKV_BENCH_BLAS="openblas",
                   OPENBLAS_NUM_THREADS=str(args.threads),
                   LD_LIBRARY_PATH=OPENBLAS + (":" + os.environ["LD_LIBRARY_PATH"]
                                               if os.environ.get("LD_LIBRARY_PATH") else ""))
        os.execve(sys.executable, [sys.executable] + sys.argv, env)


def main():
    args = parse_args()
    maybe_reexec(args)
    sys.path.insert(0, EXAMPLES)
    import numpy as np
    import torch

    import tierkv
    from tiny_engine import Engine, ModelConfig
    from tiny_engine.__main__ import logits_digest

    torch.set_num_threads(args.threads)
    blas = os.environ.get("TIERKV_BENCH_BLAS", "system")
    out = []

    def emit(obj):
        out.append(obj)
        if args.json:
            print(json.dumps(obj), flush=True)

    model = ModelConfig(**json.loads(args.model))
    bs, n_cached = args.block_size, args.tokens
    if n_cached % bs or n_cached < 2 * bs:
        raise SystemExit("--tokens must be a multiple of --block-size, at least two blocks")
    n = n_cached + 1
    rnd = random.Random(7)
    prompt = [rnd.randrange(model.vocab_size) for _ in range(n)]
    primer = prompt[:n_cached // 2 + 1]  # stores exactly the first half of the prefix
    kv_bytes = model.kv_bytes_per_token()
    flops = model.prefill_flops_per_token(n // 2)
    emit({"bench": "engine_model", **model.to_dict(), "block_size": bs, "prompt_tokens": n,
          "kv_bytes_per_token": kv_bytes, "prefill_flops_per_token_avg": flops,
          "blas": blas, "threads": args.threads})
    log(f"engine bench: model {model.name}: {model.n_layers} layers, d_model {model.d_model}, "
        f"{model.n_heads} heads / {model.n_kv_heads} KV heads, {model.dtype}; prompt {n} tokens; "
        f"~{flops / 1e6:.1f} MFLOP per prefill token (mean over the prompt), "
        f"{kv_bytes} KV bytes per token ({kv_bytes * n_cached / 2**20:.0f} MiB for the prefix); "
        f"BLAS {blas}, {args.threads} threads")

    root = args.dir or tempfile.mkdtemp(prefix="tierkv-engine-bench-", dir="/var/tmp")
    os.makedirs(root, exist_ok=True)
    seg = max(256 << 20, 4 * kv_bytes * n)
    dram = tierkv.DistributedStore()
    rc = dram.setup({"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
                     "global_segment_size": seg, "local_buffer_size": 64 << 20,
                     "protocol": "tcp", "master_server_addr": ""})
    if rc:
        raise SystemExit(f"setup: {tierkv.strerror(rc)} {dram.last_error()}")
    nblocks = (n + bs) // bs + 1

    def cfg(prefix, role="kv_both"):
        return {"kv_role": role, "kv_connector_extra_config": {
            "chunk_size": bs, "load_async": False, "cache_prefix": prefix}}

    def run(engine, tokens, what):
        (r,) = engine.generate([tokens], 1)
        return r

    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    failures = []

    # 1. Recompute (a miss: nothing stored under this prefix yet; saves run behind it).
    e = Engine(model, nblocks, bs, cfg(prefix), dram, threads=args.threads)
    ref = run(e, prompt, "recompute")
    e.close()
    ttft_recompute = ref.ttft
    emit({"bench": "engine_ttft", "case": "recompute", "ttft_s": ttft_recompute,
          "hit_tokens": 0, "saved_objects": e.worker.stats["saved_objects"]})
    log(f"  recompute: TTFT {ttft_recompute:.3f} s")
    del e

    def check(r, case, want_hit):
        ok = (r.output_token_ids == ref.output_token_ids and logits_digest(r) == logits_digest(ref))
        if not ok:
            failures.append(f"{case}: output differs from the recomputed one")
        if r.external_hit_tokens + r.local_hit_tokens != want_hit or r.load_error_blocks:
            failures.append(f"{case}: hit {r.local_hit_tokens}+{r.external_hit_tokens} tokens, "
                            f"{r.load_error_blocks} load errors (want {want_hit}, 0)")
        return ok

    # 2. DRAM reload (a fresh engine: empty local cache).
    e = Engine(model, nblocks, bs, cfg(prefix), dram, threads=args.threads)
    r = run(e, prompt, "dram")
    st = dict(e.worker.stats)
    hashes = e.worker.chunk_hashes_hex(prompt)[:n_cached // bs]
    dram_gbps, memcpy_gbps, dram_ratio = load_pairs(args, e, hashes, None, tierkv, torch)
    e.close()
    check(r, "dram", n_cached)
    emit({"bench": "engine_ttft", "case": "dram", "ttft_s": r.ttft, "hit_tokens": n_cached,
          "loaded_bytes": st["loaded_bytes"], "load_s": st["load_seconds"],
          "load_gbps": dram_gbps, "memcpy_gbps": memcpy_gbps, "load_ratio": dram_ratio,
          "pairs": args.reps})
    log(f"  DRAM reload: TTFT {r.ttft:.4f} s (load {st['loaded_bytes'] / 2**20:.0f} MiB in "
        f"{st['load_seconds'] * 1e3:.1f} ms); load pairs: {dram_gbps:.2f} GB/s vs memcpy "
        f"{memcpy_gbps:.2f} GB/s, ratio {dram_ratio:.2f} (median of {args.reps})")
    ttft_dram = r.ttft
    del e

    # 3. SSD reload: the same objects in an embedded store with an SSD tier, pushed to disk.
    ssd_dir = os.path.join(root, "tier")
    os.makedirs(ssd_dir, exist_ok=True)
    obj = kv_bytes // model.n_layers * bs
    ssd_seg = max(64 << 20, obj * len(hashes) * model.n_layers * 2)
    ssd = tierkv.DistributedStore()
    rc = ssd.setup({"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
                    "global_segment_size": ssd_seg, "local_buffer_size": max(64 << 20, 2 * obj),
                    "protocol": "tcp", "master_server_addr": "", "enable_ssd_offload": True,
                    "ssd_offload_path": ssd_dir, "offload_capacity": 4 * ssd_seg,
                    "offload_region_size": 16 << 20, "staging_buffer_size": 256 << 20,
                    "eviction_high_watermark_ratio": 0.5, "eviction_ratio": 0.5,
                    "default_kv_lease_ttl_ms": 500})
    if rc:
        raise SystemExit(f"SSD setup: {tierkv.strerror(rc)} {ssd.last_error()}")
    probe = Engine(model, 2, bs, cfg(prefix), ssd, threads=args.threads)
    hashes = probe.worker.chunk_hashes_hex(prompt)[:n_cached // bs]
    keys = [probe.worker.key(layer, h) for h in hashes for layer in range(model.n_layers)]
    probe.close()
    del probe
    for k in keys:
        v = dram.get(k)
        if len(v) != obj or ssd.put(k, v) != 0:
            raise SystemExit(f"copying {k} into the SSD store failed")
    filler = np.random.default_rng(0).integers(0, 255, size=4 << 20, dtype=np.uint8).tobytes()
    on_disk = False
    for i in range(400):
        if ssd.put(f"filler-{i}", filler) != 0:
            break
        if i % 8 == 7:
            time.sleep(0.3)
            d = ssd.batch_get_replica_desc(keys)
            if all(d.get(k) and all(x.is_disk_replica() for x in d[k]) for k in keys):
                on_disk = True
                break
    if not on_disk:
        raise SystemExit("the prefix's objects never moved to the SSD tier")
    time.sleep(0.6)  # the leases of the check above end
    e = Engine(model, nblocks, bs, cfg(prefix), ssd, threads=args.threads)
    r = run(e, prompt, "ssd")
    st = dict(e.worker.stats)
    d = ssd.batch_get_replica_desc(keys)  # still only on disk (no promotion)
    if not all(d.get(k) and all(x.is_disk_replica() for x in d[k]) for k in keys):
        failures.append("ssd: objects left the SSD tier during the run")
    time.sleep(0.6)
    ssd_gbps, fio_gbps, ssd_ratio = load_pairs(args, e, hashes, (root, obj), tierkv, torch)
    e.close()
    del e
    check(r, "ssd", n_cached)
    emit({"bench": "engine_ttft", "case": "ssd", "ttft_s": r.ttft, "hit_tokens": n_cached,
          "loaded_bytes": st["loaded_bytes"], "load_s": st["load_seconds"],
          "load_gbps": ssd_gbps, "fio_read_gbps": fio_gbps, "load_ratio": ssd_ratio,
          "pairs": args.reps, "object_bytes": obj, "dir": root})
    log(f"  SSD reload: TTFT {r.ttft:.4f} s (load {st['loaded_bytes'] / 2**20:.0f} MiB in "
        f"{st['load_seconds'] * 1e3:.1f} ms); load pairs: {ssd_gbps:.2f} GB/s vs fio O_DIRECT "
        f"read of {obj >> 10} KiB blocks at qd16 {fio_gbps:.2f} GB/s, ratio {ssd_ratio:.2f} "
        f"(median of {args.reps}; {root})")
    ttft_ssd = r.ttft
    ssd.close()

    # 4. Half the prefix cached: in tierkv (loaded layer-wise while the rest computes) vs in
    #    the engine's own pages (its local prefix cache, the same request after its primer).
    half_prefix = f"{prefix}-half"
    e = Engine(model, nblocks, bs, cfg(half_prefix), dram, threads=args.threads)
    run(e, primer, "primer")  # tierkv holds exactly the first half of the prefix
    e.close()
    del e
    halves, ideals, st = [], [], None
    for rep in range(args.reps):
        for case in (("half", "ideal") if rep % 2 == 0 else ("ideal", "half")):
            if case == "half":  # a fresh engine: the half comes from tierkv, layer-wise
                e = Engine(model, nblocks, bs, cfg(half_prefix, "kv_consumer"), dram,
                           threads=args.threads)
                r_half = run(e, prompt, "half")
                st = dict(e.worker.stats)
                check(r_half, "half", n_cached // 2)
                halves.append(r_half.ttft)
            else:  # the same request after its primer: the half is in the engine's pages
                e = Engine(model, nblocks, bs, None, None, threads=args.threads)
                run(e, primer, "primer")
                r_ideal = run(e, prompt, "half-ideal")
                check(r_ideal, "half-ideal", n_cached // 2)
                if r_ideal.local_hit_tokens != n_cached // 2:
                    failures.append("half-ideal: the cached half was not a local hit")
                ideals.append(r_ideal.ttft)
            e.close()
            del e
    ttft_half, ttft_ideal = statistics.median(halves), statistics.median(ideals)
    # Each rep is a pair measured back to back; on shared cores the pairs' ratio is far
    # steadier than the ratio of the medians.
    half_ratio = statistics.median(h / i for h, i in zip(halves, ideals))
    emit({"bench": "engine_ttft", "case": "half", "ttft_s": ttft_half,
          "ttft_ideal_s": ttft_ideal, "ttft_reps_s": halves, "ttft_ideal_reps_s": ideals,
          "ratio": half_ratio,
          "hit_tokens": n_cached // 2,
          "load_s": st["load_seconds"], "loaded_bytes": st["loaded_bytes"]})
    log(f"  half cached: TTFT {ttft_half:.3f} s with the half loaded from tierkv "
        f"(load {st['load_seconds'] * 1e3:.1f} ms, overlapped), {ttft_ideal:.3f} s with it in "
        f"the engine's own pages (medians of {args.reps}, alternating; median pair ratio "
        f"{half_ratio:.3f})")
    dram.close()

    # 5. The same prompt through tierkv's vLLM integration (tierkv.integrations.vllm, loaded
    #    and driven as vLLM does): recompute, DRAM reload, SSD reload (objects demoted).
    vllm = vllm_integration_ttft(args, model, prompt, nblocks, ref, logits_digest, root,
                                 Engine, failures, emit)

    # 6. Trace replay.
    if os.path.exists(args.trace):
        trace = trace_replay(args, model, emit, Engine, tierkv)
    else:
        log(f"  trace replay NOT RUN: {args.trace} does not exist (--trace PATH)")
        none = {"ttft_mean_s": None, "ttft_p90_s": None, "hit_rate": None}
        trace = {"requests": 0, "outputs_differ": 0, "tierkv": none, "local_only": none}
    if trace["outputs_differ"]:
        failures.append(f"trace: {trace['outputs_differ']} requests' tokens differ between "
                        "tierkv and local-only")

    summary = {
        "bench": "engine", "ttft_recompute_s": ttft_recompute, "ttft_dram_s": ttft_dram,
        "ttft_ssd_s": ttft_ssd, "ttft_half_s": ttft_half, "ttft_half_ideal_s": ttft_ideal,
        "speedup_dram": ttft_recompute / ttft_dram, "speedup_ssd": ttft_recompute / ttft_ssd,
        "dram_load_ratio": dram_ratio, "ssd_load_ratio": ssd_ratio,
        "dram_load_gbps": dram_gbps, "memcpy_gbps": memcpy_gbps, "ssd_load_gbps": ssd_gbps,
        "fio_read_gbps": fio_gbps, "half_ratio": half_ratio,
        "trace_ttft_mean_s": trace["tierkv"]["ttft_mean_s"],
        "trace_ttft_mean_local_only_s": trace["local_only"]["ttft_mean_s"],
        "trace_ttft_p90_s": trace["tierkv"]["ttft_p90_s"],
        "trace_ttft_p90_local_only_s": trace["local_only"]["ttft_p90_s"],
        "trace_hit_rate": trace["tierkv"]["hit_rate"],
        "trace_hit_rate_local_only": trace["local_only"]["hit_rate"],
        "trace_requests": trace["requests"], "prompt_tokens": n,
        "kv_bytes_per_token": kv_bytes, "prefill_flops_per_token_avg": flops, "blas": blas,
        "threads": args.threads, "outputs_identical": not failures,
        "vllm_ttft_recompute_s": vllm["recompute"], "vllm_ttft_dram_s": vllm["dram"],
        "vllm_ttft_ssd_s": vllm["ssd"], "vllm_speedup_dram": vllm["recompute"] / vllm["dram"],
        "vllm_speedup_ssd": vllm["recompute"] / vllm["ssd"],
    }
    if args.json:
        print(json.dumps(summary), flush=True)
    targets = [
        ("speedup_dram >= 20", summary["speedup_dram"] >= 20),
        ("speedup_ssd >= 10", summary["speedup_ssd"] >= 10),
        ("dram_load_ratio >= 0.7", summary["dram_load_ratio"] >= 0.7),
        ("ssd_load_ratio >= 0.7", summary["ssd_load_ratio"] >= 0.7),
        ("vLLM integration: vllm_speedup_dram >= 20", summary["vllm_speedup_dram"] >= 20),
        ("vLLM integration: vllm_speedup_ssd >= 10", summary["vllm_speedup_ssd"] >= 10),
        ("ttft_half_s <= 1.15 x ttft_half_ideal_s (median of the pairs' ratios)",
         summary["half_ratio"] <= 1.15),
    ]
    if trace["requests"]:
        targets.append(("trace mean TTFT with tierkv < local only",
                        summary["trace_ttft_mean_s"] < summary["trace_ttft_mean_local_only_s"]))
    log(f"engine bench: TTFT recompute {ttft_recompute:.3f} s, DRAM {ttft_dram:.4f} s "
        f"(x{summary['speedup_dram']:.0f}), SSD {ttft_ssd:.4f} s (x{summary['speedup_ssd']:.0f}); "
        f"half {ttft_half:.3f} s vs {ttft_ideal:.3f} s ideal; "
        + (f"trace mean TTFT {summary['trace_ttft_mean_s'] * 1e3:.1f} ms vs "
           f"{summary['trace_ttft_mean_local_only_s'] * 1e3:.1f} ms local only"
           if trace["requests"] else "no trace replay"))
    for name, ok in targets:
        log(f"  {'PASS' if ok else 'FAIL'}  {name}")
    if not args.dir:
        shutil.rmtree(root, ignore_errors=True)
    for f in failures:
        log(f"engine bench: ERROR: {f}")
    return 1 if failures else 0


def vllm_integration_ttft(args, model, prompt, nblocks, ref, logits_digest, root, Engine,
                          failures, emit):
    """TTFT of the prompt through tierkv.integrations.vllm: recomputed (a miss) and reloaded
    from DRAM (an embedded store), then reloaded from the SSD tier (a second embedded store
    with an SSD tier, primed by an untimed run whose objects are then demoted: objects that
    were read once stay in DRAM longer under the reuse-aware eviction policy, so the DRAM
    store's are not the ones demoted). The bench holds both stores, so objects outlive the
    engines."""
    import numpy as np

    from tierkv import strerror as tierkv_strerror
    from tierkv.integrations import _common

    bs, n_cached = args.block_size, args.tokens
    obj = model.kv_bytes_per_token() // model.n_layers * bs
    seg = max(64 << 20, obj * (n_cached // bs) * model.n_layers * 2)
    ssd_dir = os.path.join(root, "vllm-tier")
    os.makedirs(ssd_dir, exist_ok=True)
    dram_setup = dict(_common.EMBEDDED_DEFAULTS, global_segment_size=max(256 << 20, 4 * seg),
                      local_buffer_size=64 << 20)
    ssd_setup = dict(_common.EMBEDDED_DEFAULTS, global_segment_size=seg,
                     local_buffer_size=max(64 << 20, 2 * obj), enable_ssd_offload=True,
                     ssd_offload_path=ssd_dir, offload_capacity=4 * seg,
                     offload_region_size=16 << 20, staging_buffer_size=256 << 20,
                     eviction_high_watermark_ratio=0.5, eviction_ratio=0.5,
                     default_kv_lease_ttl_ms=500)
    stores = [_common.shared_store(dram_setup), _common.shared_store(ssd_setup)]
    prefix = f"vllm-{uuid.uuid4().hex[:6]}"

    def config(setup):
        return {"kv_connector": "TierkvConnector",
                "kv_connector_module_path": "tierkv.integrations.vllm", "kv_role": "kv_both",
                "kv_connector_extra_config": {"load_async": False, "store": setup,
                                              "cache_prefix": prefix,
                                              "staging_buffer_size": max(64 << 20, 16 * obj)}}

    out, keys = {}, []
    for case, setup in (("recompute", dram_setup), ("dram", dram_setup),
                        ("ssd-prime", ssd_setup), ("ssd", ssd_setup)):
        if case == "ssd":
            push_to_disk(stores[1], keys, np, tierkv_strerror)
        e = Engine(model, nblocks, bs, config(setup), None, threads=args.threads)
        (r,) = e.generate([prompt], 1)
        st = e.connector_stats()
        if case == "recompute":
            keys = [e.worker.keys.layer_key(0, e.worker.worker.layer_index[name], h)
                    for h in r.hashes[:n_cached // bs] for name in e.layer_names]
        e.close()
        want = n_cached if case in ("dram", "ssd") else 0
        if (r.output_token_ids != ref.output_token_ids
                or logits_digest(r) != logits_digest(ref)):
            failures.append(f"vllm {case}: output differs from the recomputed one")
        if r.external_hit_tokens != want or r.load_error_blocks:
            failures.append(f"vllm {case}: hit {r.external_hit_tokens} tokens, "
                            f"{r.load_error_blocks} load errors (want {want}, 0)")
        if case == "ssd-prime":
            continue
        out[case] = r.ttft
        emit({"bench": "engine_ttft_vllm_integration", "case": case, "ttft_s": r.ttft,
              "hit_tokens": r.external_hit_tokens, "loaded_bytes": st["loaded_bytes"],
              "load_s": st["load_seconds"], "saved_objects": st["saved_objects"]})
        log(f"  vLLM integration, {case}: TTFT {r.ttft:.4f} s "
            f"(hit {r.external_hit_tokens} tokens, load {st['load_seconds'] * 1e3:.1f} ms)")
    for s in stores:
        _common.release_store(s)
    return out


def push_to_disk(store, keys, np, strerror):
    """Puts 4 MiB fillers until every key has only disk replicas, then lets leases end."""
    filler = np.random.default_rng(0).integers(0, 255, size=4 << 20, dtype=np.uint8).tobytes()
    for i in range(400):
        rc = store.put(f"vllm-filler-{i}", filler)
        if rc != 0:
            raise SystemExit(f"vLLM integration: filler put {i} failed: {strerror(rc)}")
        if i % 8 == 7:
            time.sleep(0.3)
            d = store.batch_get_replica_desc(keys)
            if all(d.get(k) and all(x.is_disk_replica() for x in d[k]) for k in keys):
                time.sleep(0.6)
                return
    raise SystemExit("vLLM integration: the prefix never moved to the SSD tier")


def load_pairs(args, engine, hashes, disk, tierkv, torch):
    """Medians over --reps pairs of (the connector's layer-wise load of every block of the
    prefix into the engine's pages, the baseline): memcpy of the same bytes in the same
    pieces into the same pages, or (disk = (dir, object bytes)) a fio read. Returns (load
    GB/s, baseline GB/s, median of the pairs' ratios)."""
    from tierkv.connector import LoadSpec, TierkvConnectorMetadata

    w = engine.worker
    blocks = list(range(1, 1 + len(hashes)))
    nbytes = len(blocks) * sum(t[0].numel() * t.element_size() for t in engine.kv)
    src = None
    if disk is None:
        src = [[engine.kv[layer][b].clone() for b in blocks] for layer in range(len(engine.kv))]
    loads, bases, ratios = [], [], []
    for rep in range(args.reps):
        w.bind_connector_metadata(TierkvConnectorMetadata(
            loads=[LoadSpec("bench-load", blocks, hashes)]))
        t0 = time.perf_counter()
        w.start_load_kv()
        w.wait_for_layer_load(len(engine.kv) - 1)
        load_s = time.perf_counter() - t0
        w.clear_connector_metadata()
        if w.get_block_ids_with_load_errors():
            raise SystemExit("engine bench: a load failed in the load pairs")
        if disk is None:
            t0 = time.perf_counter()
            for layer, pieces in enumerate(src):
                for b, piece in zip(blocks, pieces):
                    engine.kv[layer][b].copy_(piece)
            base = nbytes / (time.perf_counter() - t0) / 1e9
        else:
            base = fio_read(disk[0], disk[1])
        loads.append(nbytes / load_s / 1e9)
        bases.append(base)
        ratios.append(loads[-1] / base)
        time.sleep(0.6 if disk else 0)  # the SSD store's short leases end between passes
    return statistics.median(loads), statistics.median(bases), statistics.median(ratios)


def fio_read(root, block):
    path = os.path.join(root, "fio.dat")
    cmd = ["fio", "--name=engine-read", f"--filename={path}", "--size=256M", "--rw=read",
           f"--bs={block}", "--iodepth=16", "--ioengine=io_uring", "--direct=1",
           "--numjobs=1", "--output-format=json"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        cmd[cmd.index("--ioengine=io_uring")] = "--ioengine=libaio"
        r = subprocess.run(cmd, capture_output=True, text=True)
    try:
        os.unlink(path)
    except OSError:
        pass
    if r.returncode != 0:
        raise SystemExit(f"fio failed: {r.stderr}")
    j = json.loads(r.stdout[r.stdout.index("{"):])
    return j["jobs"][0]["read"]["bw_bytes"] / 1e9


def trace_requests(args, vocab, max_positions):
    # Capped so that one request fits the engine's pages (with room for its output token).
    cap = min(max_positions - 2, (args.trace_local_blocks - 2) * args.trace_block_size)
    reqs = []
    with open(args.trace) as f:
        for line in f:
            if len(reqs) >= args.trace_requests:
                break
            t = json.loads(line)
            tokens = []
            for h in t["hash_ids"]:
                g = random.Random(h * 1_000_003 + 17)
                tokens.extend(g.randrange(vocab) for _ in range(args.tokens_per_hash))
            scaled = max(1, round(t["input_length"] * args.tokens_per_hash / 512))
            tokens = tokens[:min(scaled, cap)]
            reqs.append(tokens)
    return reqs


def trace_replay(args, model, emit, Engine, tierkv):
    """Both engines side by side, each request to one then the other (the order alternating),
    so that both see the same machine load."""
    reqs = trace_requests(args, model.vocab_size, model.max_positions)
    total = sum(len(r) for r in reqs)
    res = {"requests": len(reqs)}
    store = tierkv.DistributedStore()
    # Room for every prompt's KV (the replay measures reuse, not the store's eviction).
    seg = max(512 << 20, total * model.kv_bytes_per_token() * 5 // 4)
    rc = store.setup({"local_hostname": "localhost", "metadata_server": "P2PHANDSHAKE",
                      "global_segment_size": seg, "local_buffer_size": 16 << 20,
                      "protocol": "tcp", "master_server_addr": ""})
    if rc:
        raise SystemExit(f"setup: {tierkv.strerror(rc)}")
    conf = {"kv_role": "kv_both", "kv_connector_extra_config": {
        "chunk_size": args.trace_block_size, "load_async": False,
        "cache_prefix": f"trace-{uuid.uuid4().hex[:6]}"}}
    engines = {
        "local_only": Engine(model, args.trace_local_blocks, args.trace_block_size, None, None,
                             threads=args.threads),
        "tierkv": Engine(model, args.trace_local_blocks, args.trace_block_size, conf, store,
                         threads=args.threads),
    }
    ttfts = {m: [] for m in engines}
    hits = {m: 0 for m in engines}
    outputs_differ = 0
    for i, toks in enumerate(reqs):
        order = list(engines) if i % 2 == 0 else list(engines)[::-1]
        got = {}
        for mode in order:
            (r,) = engines[mode].generate([toks], 1)
            ttfts[mode].append(r.ttft)
            hits[mode] += r.local_hit_tokens + r.external_hit_tokens
            got[mode] = r.output_token_ids
        outputs_differ += got["local_only"] != got["tierkv"]
    for e in engines.values():
        e.close()
    store.close()
    for mode, e in engines.items():
        t = sorted(ttfts[mode])
        m = {"ttft_mean_s": statistics.fmean(t), "ttft_p90_s": t[min(len(t) - 1, int(0.9 * len(t)))],
             "hit_rate": hits[mode] / total, "local_evictions": e.blocks.evictions}
        res[mode] = m
        emit({"bench": "engine_trace", "mode": mode, "requests": len(reqs),
              "prompt_tokens": total, "tokens_per_hash": args.tokens_per_hash,
              "block_size": args.trace_block_size, "local_blocks": args.trace_local_blocks,
              "outputs_differ": outputs_differ, **m})
        log(f"  trace ({mode}): {len(reqs)} requests, {total} prompt tokens "
            f"({args.tokens_per_hash} tokens per hash id, 1/{512 // args.tokens_per_hash} of "
            f"the trace's lengths; {args.trace_local_blocks} local blocks of "
            f"{args.trace_block_size}): mean TTFT {m['ttft_mean_s'] * 1e3:.1f} ms, p90 "
            f"{m['ttft_p90_s'] * 1e3:.1f} ms, prefix-hit rate {m['hit_rate']:.3f}")
    res["outputs_differ"] = outputs_differ
    return res


if __name__ == "__main__":
    sys.exit(main())
