"""Paired, interleaved A/B runs of one `tierkv bench` command: variant A and variant B (extra
arguments and/or environment variables each) run alternately, --rounds times, and every row
(path, operation, object size) gets B's GB/s over A's of the same round, and each variant's ratio
against the bench's own baseline (memcpy, raw TCP) of its run. Summary: the median over rounds
with the spread. The order within a round alternates (A then B, then B then A) so that a drift of
the machine during a round does not favour one side.

Usage: /usr/bin/python3 bench/paired_ab.py [--tierkv ./build/tierkv] [--rounds 5]
           [--a-args "..."] [--b-args "..."] [--a-env K=V ...] [--b-env K=V ...]
           [--a-name off] [--b-name on] -- remote --sizes 64KiB,256KiB --working-set 256MiB
(A value that is one --flag alone is written --b-args=--flag: argparse reads a bare "--flag"
as an option of its own.)
e.g. the master's metadata channel off against on:
       --a-args "--config off.json" --b-args "--config on.json"   (master_meta_channel false/true)
Output: one JSON line per row and round ({"bench":"paired_ab","path":"shm","op":"put",
"object":"64KiB","round":1,"gbps_a":...,"gbps_b":...,"b_over_a":...,"ratio_a":...,"ratio_b":...}),
then one summary line per row ({"op":"summary",...,"b_over_a":...,"b_over_a_min":...,
"b_over_a_max":...,"ratio_a":...,"ratio_b":...}) on stdout; a table on stderr. Exit 1 when a run
fails, 2 on bad arguments.
"""

import argparse
import json
import shlex
import statistics
import sys

from bench_runs import BenchFailed, run_rows, size_text


def parse_env(pairs, ap):
    env = {}
    for kv in pairs or []:
        if "=" not in kv:
            ap.error(f"an environment variable is NAME=VALUE, not '{kv}'")
        k, v = kv.split("=", 1)
        env[k] = v
    return env


def median_spread(values):
    return statistics.median(values), min(values), max(values)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tierkv", default="./build/tierkv")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--a-args", default="", help="extra arguments of variant A")
    ap.add_argument("--b-args", default="", help="extra arguments of variant B")
    ap.add_argument("--a-env", nargs="*", help="NAME=VALUE for variant A's run")
    ap.add_argument("--b-env", nargs="*", help="NAME=VALUE for variant B's run")
    ap.add_argument("--a-name", default="A")
    ap.add_argument("--b-name", default="B")
    ap.add_argument("bench", nargs=argparse.REMAINDER,
                    help="after --: the bench and its arguments (e.g. remote --sizes 64KiB)")
    args = ap.parse_args()
    bench = [a for a in args.bench if a != "--"]
    if not bench:
        ap.error("name the bench after --, e.g. -- remote --sizes 64KiB")
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    variants = {
        "a": (shlex.split(args.a_args), parse_env(args.a_env, ap)),
        "b": (shlex.split(args.b_args), parse_env(args.b_env, ap)),
    }
    base = [args.tierkv, "bench"] + bench + ["--json"]
    series = {}  # row key -> {"b_over_a": [...], "ratio_a": [...], "ratio_b": [...]}
    try:
        for rnd in range(1, args.rounds + 1):
            order = ("a", "b") if rnd % 2 == 1 else ("b", "a")
            rows = {}
            for v in order:
                extra, env = variants[v]
                rows[v] = run_rows(base + extra, env)
            for key in sorted(rows["a"].keys() & rows["b"].keys()):
                a, b = rows["a"][key], rows["b"][key]
                b_over_a = b["gbps"] / a["gbps"] if a["gbps"] > 0 else 0.0
                s = series.setdefault(key, {"b_over_a": [], "ratio_a": [], "ratio_b": [],
                                            "gbps_a": [], "gbps_b": []})
                s["b_over_a"].append(b_over_a)
                s["gbps_a"].append(a["gbps"])
                s["gbps_b"].append(b["gbps"])
                if a.get("ratio") is not None and b.get("ratio") is not None:
                    s["ratio_a"].append(a["ratio"])
                    s["ratio_b"].append(b["ratio"])
                path, op, size = key
                print(json.dumps({"bench": "paired_ab", "path": path, "op": op,
                                  "object": size_text(size), "round": rnd,
                                  "a": args.a_name, "b": args.b_name,
                                  "gbps_a": a["gbps"], "gbps_b": b["gbps"],
                                  "b_over_a": round(b_over_a, 3), "ratio_a": a.get("ratio"),
                                  "ratio_b": b.get("ratio")}), flush=True)
    except BenchFailed as e:
        print(f"paired_ab: {e}", file=sys.stderr)
        return 1
    print(f"{' '.join(bench)}: {args.b_name} against {args.a_name}, {args.rounds} paired "
          f"rounds (median, min-max)", file=sys.stderr)
    print(f"  {'path':9} {'op':4} {'object':>7}  {args.a_name + ' GB/s':>12} "
          f"{args.b_name + ' GB/s':>12}  {'B/A':>16}  {'ratio A':>7} {'ratio B':>7}",
          file=sys.stderr)
    for key, s in series.items():
        path, op, size = key
        med, lo, hi = median_spread(s["b_over_a"])
        summary = {"bench": "paired_ab", "op": "summary", "path": path, "operation": op,
                   "object": size_text(size), "rounds": len(s["b_over_a"]),
                   "a": args.a_name, "b": args.b_name,
                   "gbps_a": round(statistics.median(s["gbps_a"]), 3),
                   "gbps_b": round(statistics.median(s["gbps_b"]), 3),
                   "b_over_a": round(med, 3), "b_over_a_min": round(lo, 3),
                   "b_over_a_max": round(hi, 3)}
        ra = rb = ""
        if s["ratio_a"]:
            summary["ratio_a"] = round(statistics.median(s["ratio_a"]), 3)
            summary["ratio_b"] = round(statistics.median(s["ratio_b"]), 3)
            ra, rb = f"{summary['ratio_a']:.2f}", f"{summary['ratio_b']:.2f}"
        print(json.dumps(summary))
        print(f"  {path:9} {op:4} {size_text(size):>7}  {summary['gbps_a']:12.2f} "
              f"{summary['gbps_b']:12.2f}  {med:5.2f} ({lo:.2f}-{hi:.2f})  {ra:>7} {rb:>7}",
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
