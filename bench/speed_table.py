"""Issue 27's table in one sitting: every row's bench, one after another, each ratio paired with
its baseline measured in the same run (the benches pair them per rep), median and spread.

Rows and their benches:
  remote   `tierkv bench remote --sizes 64KiB,256KiB,2MiB --reps R`: shm / tcp get and put
           against memcpy and raw TCP at their best
  disk     `tierkv bench disk --dir D --reps R`: load / demote against fio, the virtio disk
  fast     `scripts/fast-disk.sh up 2` (root), then `bench disk` on one loop device and striped
           over two: load / demote against fio, stripe_ratio, two devices over one
  remote-disk  `tierkv bench disk-remote --dir D --reps R`: remote_load_ratio
  engine   `tierkv bench engine --reps R` (no trace replay): the layer-wise DRAM load
  pieces   `bench/pieces_ratio.py --rounds R`: 64 pieces against 1, every path
  redis    `tierkv bench redis --reps R`: shm / tcp get against Redis at its best

Usage: /usr/bin/python3 bench/speed_table.py [--tierkv ./build/tierkv] [--reps 5]
           [--only remote,disk,...] [--disk-dir /var/tmp/tierkv-speed] [--json]
Output: one JSON line per row ({"bench":"speed_table","row":...,"ratio":...,"ratio_min":...,
"ratio_max":...,"target":...,"pass":...,"baseline":...}) on stdout, a table on stderr. A bench that
fails is reported and the other stages still run; the exit status is then 1.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys

import bench_runs
from bench_runs import BenchFailed

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# The default order: the loop devices (root only) last.
STAGES = ("remote", "redis", "pieces", "engine", "disk", "remote-disk", "fast")

# Issue 27's targets (its table), per row.
REMOTE_TARGETS = {
    ("shm", "get", 65536): 0.75, ("shm", "put", 65536): 0.6,
    ("shm", "get", 262144): 0.9, ("shm", "put", 262144): 0.8,
    ("shm", "get", 2097152): 0.85, ("shm", "put", 2097152): 0.9,
    ("tcp", "get", 65536): 0.6, ("tcp", "put", 65536): 0.5,
    ("tcp", "get", 262144): 0.8, ("tcp", "put", 262144): 0.7,
    ("tcp", "get", 2097152): 0.8, ("tcp", "put", 2097152): 0.8,
}
SIZE_NAMES = {65536: "64 KiB", 262144: "256 KiB", 2097152: "2 MiB"}


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run_json(cmd):
    """A bench's JSON lines, its command line logged first (bench_runs.run_json)."""
    return bench_runs.run_json(cmd, log=log)


def row(name, ratio, lo, hi, target, baseline, **extra):
    return {"bench": "speed_table", "row": name, "ratio": ratio, "ratio_min": lo,
            "ratio_max": hi, "target": target,
            "pass": None if ratio is None else ratio >= target, "baseline": baseline, **extra}


def spread(values):
    return (min(values), max(values)) if values else (None, None)


def stage_remote(args):
    lines = run_json([args.tierkv, "bench", "remote", "--json", "--reps", str(args.reps),
                      "--sizes", "64KiB,256KiB,2MiB", "--working-set", args.working_set])
    rows = []
    for d in lines:
        key = (d.get("transport"), d.get("op"), d.get("object_bytes"))
        if key not in REMOTE_TARGETS or "rep" in d or d.get("ratio") is None:
            continue
        rows.append(row(f"{key[0]} {key[1]} {SIZE_NAMES[key[2]]}", d["ratio"], d.get("ratio_min"),
                        d.get("ratio_max"), REMOTE_TARGETS[key],
                        f"{d['baseline']} {d['baseline_gbps']} GB/s", gbps=d["gbps"]))
    return rows


def disk_summary(args, dirs):
    cmd = [args.tierkv, "bench", "disk", "--json", "--reps", str(args.reps)]
    cmd += ["--dirs", ",".join(dirs)] if len(dirs) > 1 else ["--dir", dirs[0]]
    lines = run_json(cmd)
    summary = next(d for d in lines if d.get("bench") == "disk" and "load_ratio" in d)
    pairs = {d["op"]: d.get("pair_ratios", []) for d in lines
             if d.get("op") in ("load", "demote") and "pair_ratios" in d}
    return summary, pairs


def disk_rows(label, summary, pairs):
    out = []
    for op, gbps, fio in (("load", "load_gbps", "fio_read_gbps"),
                          ("demote", "demote_gbps", "fio_write_gbps")):
        lo, hi = spread(pairs.get(op, []))
        out.append(row(f"disk {op}, {label}", summary[f"{op}_ratio"], lo, hi, 0.9,
                       f"fio {summary[fio]} GB/s", gbps=summary[gbps]))
    return out


def stage_disk(args):
    os.makedirs(args.disk_dir, exist_ok=True)
    summary, pairs = disk_summary(args, [args.disk_dir])
    return disk_rows("virtio disk", summary, pairs)


def stage_fast(args):
    if os.geteuid() != 0:
        raise BenchFailed("the loop devices need root (scripts/fast-disk.sh)")
    script = os.path.join(ROOT, "scripts", "fast-disk.sh")
    up = subprocess.run([script, "up", "2"], capture_output=True, text=True)
    if up.returncode != 0:
        raise BenchFailed(f"fast-disk.sh up 2: {up.stderr.strip()}")
    dirs = [line for line in up.stdout.split() if line.startswith("/")]
    try:
        one, one_pairs = disk_summary(args, dirs[:1])
        two, two_pairs = disk_summary(args, dirs[:2])
    finally:
        subprocess.run([script, "down"], check=False)
    rows = disk_rows("one loop device", one, one_pairs)
    rows += disk_rows("two loop devices", two, two_pairs)
    rows.append(row("stripe_ratio, two loop devices", two.get("stripe_ratio"), None, None, 0.85,
                    "fio over the same two files at once"))
    for op, gbps in (("load", "load_gbps"), ("demote", "demote_gbps")):
        scale = two[gbps] / one[gbps] if one[gbps] else None
        rows.append(row(f"disk {op}, two devices over one", scale and round(scale, 3), None, None,
                        1.7, f"one device {one[gbps]} GB/s", gbps=two[gbps]))
    return rows


def stage_remote_disk(args):
    os.makedirs(args.disk_dir, exist_ok=True)
    lines = run_json([args.tierkv, "bench", "disk-remote", "--json", "--reps", str(args.reps),
                      "--dir", args.disk_dir])
    d = next(d for d in lines if d.get("bench") == "disk_remote" and "remote_load_ratio" in d)
    return [row("disk-remote load", d["remote_load_ratio"], d.get("remote_load_ratio_min"),
                d.get("remote_load_ratio_max"), 0.8,
                f"min(fio read {d['fio_read_gbps']}, raw TCP {d['tcp_raw_gbps']}) GB/s",
                gbps=d["load_gbps"])]


def stage_engine(args):
    # No trace replay: the table's row is the layer-wise load; the TTFT runs come with it.
    lines = run_json([args.tierkv, "bench", "engine", "--json", "--reps", str(args.reps),
                      "--trace", ""])
    d = next(d for d in lines if d.get("bench") == "engine" and "dram_load_ratio" in d)
    return [row("engine layer-wise DRAM load", round(d["dram_load_ratio"], 3), None, None, 0.8,
                f"memcpy of the same pieces {round(d['memcpy_gbps'], 3)} GB/s",
                gbps=round(d["dram_load_gbps"], 3))]


def stage_pieces(args):
    lines = run_json([sys.executable, os.path.join(HERE, "pieces_ratio.py"), "--tierkv",
                      args.tierkv, "--rounds", str(args.reps)])
    return [row(f"64 pieces vs 1, {d['path']}", d["ratio"], d["ratio_min"], d["ratio_max"],
                d["target_ratio"], "the same objects in 1 piece")
            for d in lines if d.get("op") == "summary"]


def stage_redis(args):
    lines = run_json([args.tierkv, "bench", "redis", "--json", "--reps", str(args.reps),
                      "--sizes", "256KiB,2MiB"])
    rows = []
    for d in lines:
        if d.get("op") != "get" or "shm_ratio_vs_redis" not in d:
            continue
        size = SIZE_NAMES.get(d["object_bytes"], str(d["object_bytes"]))
        best = f"Redis at its best {d['redis_gbps']} GB/s"
        rows.append(row(f"redis: shm get {size}", d["shm_ratio_vs_redis"], d.get("shm_ratio_min"),
                        d.get("shm_ratio_max"), 4.0, best, gbps=d.get("shm_get_gbps")))
        rows.append(row(f"redis: tcp get {size}", d["tcp_ratio_vs_redis"], d.get("tcp_ratio_min"),
                        d.get("tcp_ratio_max"), 1.2, best, gbps=d.get("tcp_get_gbps")))
    return rows


def fmt(v):
    return "-" if v is None else f"{v:.3f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tierkv", default=os.path.join(ROOT, "build", "tierkv"))
    ap.add_argument("--reps", type=int, default=5, help="reps (paired runs) per bench, >= 5")
    ap.add_argument("--only", default=",".join(STAGES), help="stages, comma-separated")
    ap.add_argument("--disk-dir", default="/var/tmp/tierkv-speed-table",
                    help="a directory on the disk under test (removed afterwards)")
    ap.add_argument("--working-set", default="256MiB", help="bench remote's --working-set")
    ap.add_argument("--json", action="store_true", help="JSON lines on stdout")
    args = ap.parse_args()
    stages = [s for s in args.only.split(",") if s]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        ap.error(f"unknown stage(s) {','.join(unknown)}; known: {','.join(STAGES)}")
    runners = {"remote": stage_remote, "disk": stage_disk, "fast": stage_fast,
               "remote-disk": stage_remote_disk, "engine": stage_engine,
               "pieces": stage_pieces, "redis": stage_redis}
    rows, failed = [], []
    try:
        for stage in stages:
            log(f"{stage}:")
            try:
                for r in runners[stage](args):
                    rows.append(r)
                    if args.json:
                        print(json.dumps(r), flush=True)
            except (BenchFailed, StopIteration) as e:
                # The other stages still run: one bench's failure leaves the rest measurable.
                failed.append(f"{stage}: {str(e) or 'no summary line'}")
                log(f"  FAILED: {failed[-1]}")
    finally:
        shutil.rmtree(args.disk_dir, ignore_errors=True)
    log(f"\nIssue 27's table, {args.reps} paired reps per bench (median, min-max):")
    for r in rows:
        verdict = "-" if r["pass"] is None else ("PASS" if r["pass"] else "FAIL")
        log(f"  {r['row']:36} {fmt(r['ratio']):>6} ({fmt(r['ratio_min'])}-{fmt(r['ratio_max'])})"
            f"  target {r['target']:<5} {verdict:4}  vs {r['baseline']}")
    met = sum(1 for r in rows if r["pass"])
    log(f"  {met} of {len(rows)} rows meet their target")
    for f in failed:
        log(f"speed_table: {f}")
    if failed:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
