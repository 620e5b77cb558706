"""`tierkv bench python`: the Python binding against the C++ client, measured in the same run.

Data path: 2 MiB objects in 4 pieces, batches of 32, registered numpy buffers (2 MiB-aligned,
like the C++ bench's), through
DistributedStore.batch_put_from_multi_buffers / batch_get_into_multi_buffers (embedded mode),
against `tierkv bench embedded --paired` run with the same sizes, batch, pieces and working set
in its own process, started once. Each of --data-reps pairs is one C++ rep and one Python rep
back to back (the order alternating), and the ratios are medians of the pairs' ratios; every
return code is checked and the bytes checked outside the timed loops, ranges of the same kind
and size as the C++ workload checks.

Metadata: batch_is_exist over 1024-key batches (90 % hits) of connector-shaped keys, against
`tierkv bench metadata` with the same objects (64 Ki by default), batch and hit ratio, in
--reps pairs of rounds (order alternating); the medians are reported.

Output (docs/benchmarks.md): with --json, one JSON line per measurement and the summary line
{"bench":"python", "get_gbps":..., "cpp_get_gbps":..., "get_ratio_vs_cpp":...,
"put_ratio_vs_cpp":..., "exist_keys_per_s":..., ...}; a human summary on stderr with the
targets (get and put ratio >= 0.95, exist_keys_per_s >= 2e6) as PASS/FAIL. Exit 1 on a failed
key or a wrong byte (never for a missed target).
"""

import argparse
import hashlib
import json
import random
import statistics
import subprocess
import sys
import time

import numpy as np

import tierkv

GET_TARGET = 0.95
PUT_TARGET = 0.95
EXIST_TARGET = 2e6
SPOT = 64
HUGE_PAGE = 2 << 20


def aligned_array(nbytes):
    """A uint8 numpy array starting on a 2 MiB boundary, as the C++ bench's buffers do (IoBuffer:
    2 MiB-aligned, transparent huge pages). numpy's own arrays start 16 bytes past a page
    boundary; memcpy into such a destination runs at about half speed on this machine, which
    would measure the buffer's alignment instead of the binding."""
    raw = np.empty(nbytes + HUGE_PAGE, dtype=np.uint8)
    off = (-raw.ctypes.data) % HUGE_PAGE
    return raw[off:off + nbytes]  # a view: keeps `raw` alive


def parse_size(text):
    units = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
             "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}
    t = text.strip().lower()
    digits = t.rstrip("abcdefghijklmnopqrstuvwxyz ")
    return int(digits) * units[t[len(digits):].strip()]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run_json(cmd):
    """Runs a tierkv bench with --json; returns its JSON lines (stdout)."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"python bench: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr}")
    return [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]


class CppEmbedded:
    """`tierkv bench embedded --paired` with the same sizes, batch, pieces and working set, in its
    own process, started once: each rep() runs one C++ rep (put, get, memcpy, remove) and returns
    its JSON line. Both stores are built once and the reps of the two alternate within
    milliseconds, so a pair sees the same memory bandwidth (a fresh process per C++ rep put
    seconds between the two halves of a pair, and the machine's bandwidth moves that much)."""

    def __init__(self, args):
        self.proc = subprocess.Popen(
            [args.tierkv, "bench", "embedded", "--json", "--paired", "--sizes",
             str(args.object_size), "--batch", str(args.batch), "--pieces", str(args.pieces),
             "--working-set", str(args.working_set)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._expect("ready")

    def _expect(self, op):
        while True:
            line = self.proc.stdout.readline()
            if not line:
                rc = self.proc.wait()
                raise SystemExit(f"python bench: tierkv bench embedded --paired ended ({rc}) "
                                 "before its answer (its error is above)")
            if line.startswith("{"):
                row = json.loads(line)
                if row.get("op") == op:
                    return row

    def rep(self):
        self.proc.stdin.write("rep\n")
        self.proc.stdin.flush()
        return self._expect("rep")

    def close(self):
        self.proc.stdin.close()
        rc = self.proc.wait()
        if rc != 0:
            raise SystemExit(f"python bench: tierkv bench embedded --paired exited {rc}")


def cpp_metadata(args):
    """One round of `tierkv bench metadata` with the exist workload's sizes: its keys/s."""
    lines = run_json([args.tierkv, "bench", "metadata", "--json", "--objects",
                      str(args.exist_objects), "--batch", str(args.exist_batch), "--seconds",
                      str(args.exist_seconds), "--reps", "1"])
    rows = [x for x in lines if x.get("bench") == "metadata" and "target_keys_per_s" in x]
    return rows[-1]["keys_per_s"] if rows else 0


class DataPath:
    """The Python side of the data-path pairs: one embedded store, built once."""

    def __init__(self, args):
        self.args = args
        self.objects = max(1, args.working_set // args.object_size)
        total = self.objects * args.object_size
        self.store = tierkv.DistributedStore()
        # Room for every object, as the C++ bench sizes its segment (2x + 64 MiB).
        rc = self.store.setup("localhost", "P2PHANDSHAKE", 2 * total + (64 << 20), 1 << 20,
                              "tcp", "", "")
        if rc != 0:
            raise SystemExit(f"python bench: setup failed: {rc} {self.store.last_error()}")
        period = (1 << 20) + 4099  # not a divisor of the object size: objects differ
        base = np.random.default_rng(7).integers(0, 256, period, dtype=np.uint8)
        self.src = aligned_array(total)
        self.src[:] = np.resize(base, total)
        self.dst = aligned_array(total)
        self.dst.fill(0xA5)  # faults every page in before any timing
        assert self.store.register_buffer(self.src) == 0
        assert self.store.register_buffer(self.dst) == 0
        piece = args.object_size // args.pieces
        sizes = [piece] * (args.pieces - 1) + [args.object_size - piece * (args.pieces - 1)]
        self.batches = []
        s, d = self.src.ctypes.data, self.dst.ctypes.data
        for first in range(0, self.objects, args.batch):
            keys, sp, dp, sz = [], [], [], []
            for i in range(first, min(self.objects, first + args.batch)):
                keys.append(f"bench-python@size:{args.object_size}@{i:016x}")
                off = i * args.object_size
                offs = [off + sum(sizes[:j]) for j in range(args.pieces)]
                sp.append([s + o for o in offs])
                dp.append([d + o for o in offs])
                sz.append(sizes)
            self.batches.append((keys, sp, dp, sz))
        self.bytes = total

    def checked(self, rep):
        """What the check after a get reads, the same kind and size as the C++ workload's: both
        64-byte ends of every object, and all of one object per batch (which one moves with
        `rep`)."""
        size = self.args.object_size
        for i in range(self.objects):
            o = i * size
            yield o, o + SPOT
            yield o + size - SPOT, o + size
        for b in range(len(self.batches)):
            i = min(self.objects - 1, b * self.args.batch + rep % self.args.batch)
            yield i * size, (i + 1) * size

    def poison(self, rep):
        """Overwrites what the check reads, so stale bytes never pass for a transfer; the C++
        workload poisons its checked ranges likewise (not the whole buffer: that would leave the
        last L3's worth of it dirty in cache in front of the timed gets)."""
        for a, b in self.checked(rep):
            self.dst[a:b] = 0xA5

    def rep(self, rep):
        store, size = self.store, self.args.object_size
        start = time.perf_counter()
        puts = [store.batch_put_from_multi_buffers(k, sp, sz) for k, sp, _, sz in self.batches]
        put_s = time.perf_counter() - start
        for (keys, *_), codes in zip(self.batches, puts):
            bad = [(k, c) for k, c in zip(keys, codes) if c != 0]
            if bad:
                raise SystemExit(f"python bench: put failed: {bad[:3]}")
        self.poison(rep)
        start = time.perf_counter()
        gets = [store.batch_get_into_multi_buffers(k, dp, sz) for k, _, dp, sz in self.batches]
        get_s = time.perf_counter() - start
        for (keys, *_), codes in zip(self.batches, gets):
            bad = [(k, c) for k, c in zip(keys, codes) if c != size]
            if bad:
                raise SystemExit(f"python bench: get failed: {bad[:3]}")
        for a, b in self.checked(rep):
            if not np.array_equal(self.src[a:b], self.dst[a:b]):
                raise SystemExit(f"python bench: wrong bytes in object {a // size}")
        removed = store.remove_all(force=True)
        if removed != self.objects:
            raise SystemExit(f"python bench: remove_all removed {removed} of {self.objects}")
        return self.bytes / put_s / 1e9, self.bytes / get_s / 1e9


def metadata_key(i):
    return ("bench-python@tp_rank:0@pcp0@dcp0@pp_rank:0@group:0@" +
            hashlib.sha256(i.to_bytes(8, "little")).hexdigest())


def python_exist(args):
    store = tierkv.DistributedStore()
    rc = store.setup("localhost", "P2PHANDSHAKE", max(64 << 20, args.exist_objects * 256 * 2),
                     1 << 20, "tcp", "", "")
    if rc != 0:
        raise SystemExit(f"python bench: setup failed: {rc}")
    keys = [metadata_key(i) for i in range(args.exist_objects)]
    value = np.zeros(64, dtype=np.uint8)
    assert store.register_buffer(value) == 0
    for first in range(0, len(keys), 1024):
        part = keys[first:first + 1024]
        codes = store.batch_put_from(part, [value.ctypes.data] * len(part), [64] * len(part))
        if any(c != 0 for c in codes):
            raise SystemExit("python bench: metadata put failed")
    # Batches of 90 % hits and 10 % misses, shuffled, built before timing.
    rng = random.Random(5)
    hits = int(args.exist_batch * 0.9)
    queries = []
    for q in range(max(1, len(keys) // hits)):
        batch = [(k, 1) for k in keys[q * hits:(q + 1) * hits]]
        batch += [(metadata_key(10**9 + q * args.exist_batch + j), 0)
                  for j in range(args.exist_batch - len(batch))]
        rng.shuffle(batch)
        queries.append(([k for k, _ in batch], [e for _, e in batch]))
    done, calls, answers = 0, 0, []
    start = time.perf_counter()
    while time.perf_counter() - start < args.exist_seconds:
        qk, _ = queries[calls % len(queries)]
        answers.append((calls % len(queries), store.batch_is_exist(qk)))
        done += len(qk)
        calls += 1
    seconds = time.perf_counter() - start
    for q, got in answers:
        if got != queries[q][1]:
            raise SystemExit("python bench: wrong batch_is_exist answer")
    store.close()
    return done / seconds, calls


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tierkv", required=True, help="the tierkv executable (the C++ baselines)")
    p.add_argument("--json", action="store_true", help="JSON lines on stdout")
    p.add_argument("--reps", type=int, default=3,
                   help="pairs of C++ and Python batch_is_exist rounds; medians are reported")
    # 31: one pair's ratio moves 0.7-1.5 with this VM's memory bandwidth from one tenth of a
    # second to the next, even with the two halves back to back; the median of 31 stays within
    # a few percent from run to run (docs/benchmarks.md "python"). A pair takes ~0.7 s.
    p.add_argument("--data-reps", type=int, default=31,
                   help="pairs of C++ and Python data-path reps; medians are reported")
    p.add_argument("--working-set", type=parse_size, default=512 << 20)
    p.add_argument("--object-size", type=parse_size, default=2 << 20)
    p.add_argument("--pieces", type=int, default=4)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--exist-objects", type=int, default=64 * 1024)
    p.add_argument("--exist-batch", type=int, default=1024)
    p.add_argument("--exist-seconds", type=float, default=2.0)
    args = p.parse_args()
    if (min(args.reps, args.data_reps, args.pieces, args.batch) < 1
            or args.object_size < 2 * SPOT):
        p.error("--reps, --data-reps, --pieces and --batch must be >= 1, --object-size >= 128")

    out = []
    log(f"python bench: data path, {args.data_reps} pairs of C++ and Python reps ...")
    data = DataPath(args)
    partner = CppEmbedded(args)
    pairs = []
    for rep in range(args.data_reps):
        if rep % 2 == 0:
            cpp = partner.rep()
            py_put, py_get = data.rep(rep)
        else:
            py_put, py_get = data.rep(rep)
            cpp = partner.rep()
        pair = {"bench": "python", "op": "pair", "rep": rep, "put_gbps": round(py_put, 3),
                "get_gbps": round(py_get, 3), "cpp_put_gbps": cpp["put_gbps"],
                "cpp_get_gbps": cpp["get_gbps"], "cpp_memcpy_gbps": cpp["memcpy_gbps"],
                "put_ratio_vs_cpp": round(py_put / cpp["put_gbps"], 3),
                "get_ratio_vs_cpp": round(py_get / cpp["get_gbps"], 3)}
        pairs.append(pair)
        out.append(pair)
        log(f"  pair {rep + 1}: put {py_put:.2f} vs {cpp['put_gbps']:.2f} GB/s, "
            f"get {py_get:.2f} vs {cpp['get_gbps']:.2f} GB/s")
    partner.close()
    data.store.close()
    del data

    log(f"python bench: batch_is_exist, {args.reps} pairs of C++ and Python rounds ...")
    exist_rounds = []
    for rep in range(args.reps):
        if rep % 2 == 0:
            cpp_keys = cpp_metadata(args)
            py_keys, calls = python_exist(args)
        else:
            py_keys, calls = python_exist(args)
            cpp_keys = cpp_metadata(args)
        row = {"bench": "python", "op": "is_exist", "rep": rep, "objects": args.exist_objects,
               "batch": args.exist_batch, "calls": calls, "keys_per_s": round(py_keys),
               "cpp_keys_per_s": cpp_keys}
        exist_rounds.append(row)
        out.append(row)
        log(f"  pair {rep + 1}: {py_keys:.3g} vs C++ {cpp_keys:.3g} keys/s")
    exist = statistics.median(x["keys_per_s"] for x in exist_rounds)
    cpp_exist = statistics.median(x["cpp_keys_per_s"] for x in exist_rounds)

    med = lambda key: statistics.median(x[key] for x in pairs)  # noqa: E731
    summary = {"bench": "python", "object_bytes": args.object_size, "batch": args.batch,
               "pieces": args.pieces, "data_reps": args.data_reps, "reps": args.reps,
               "get_gbps": round(med("get_gbps"), 3), "put_gbps": round(med("put_gbps"), 3),
               "cpp_get_gbps": round(med("cpp_get_gbps"), 3),
               "cpp_put_gbps": round(med("cpp_put_gbps"), 3),
               "get_ratio_vs_cpp": round(med("get_ratio_vs_cpp"), 3),
               "put_ratio_vs_cpp": round(med("put_ratio_vs_cpp"), 3),
               "exist_keys_per_s": round(exist), "cpp_exist_keys_per_s": cpp_exist,
               "exist_ratio_vs_cpp": round(exist / cpp_exist, 3) if cpp_exist else 0,
               "get_target": GET_TARGET, "put_target": PUT_TARGET, "exist_target": EXIST_TARGET}
    out.append(summary)
    if args.json:
        for line in out:
            print(json.dumps(line, separators=(",", ":")))
    else:
        for line in out:
            print(line)

    def verdict(ok):
        return "PASS" if ok else "FAIL"

    log(f"python bench summary: get {summary['get_gbps']} GB/s vs C++ {summary['cpp_get_gbps']} "
        f"(ratio {summary['get_ratio_vs_cpp']}, target >= {GET_TARGET}: "
        f"{verdict(summary['get_ratio_vs_cpp'] >= GET_TARGET)}); put {summary['put_gbps']} vs "
        f"{summary['cpp_put_gbps']} (ratio {summary['put_ratio_vs_cpp']}, target >= "
        f"{PUT_TARGET}: {verdict(summary['put_ratio_vs_cpp'] >= PUT_TARGET)}); batch_is_exist "
        f"{summary['exist_keys_per_s']:.3g} keys/s vs C++ {cpp_exist:.3g} (target >= "
        f"{EXIST_TARGET:.0e}: {verdict(exist >= EXIST_TARGET)})")


if __name__ == "__main__":
    main()
