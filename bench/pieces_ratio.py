"""The layer-wise shape against one piece (issue 27): objects in --pieces buffers each (64: 32
layers x K and V) against the same objects in 1 buffer, on every path — embedded, shm and tcp,
put and get — in paired, alternating runs of `tierkv bench embedded` and `tierkv bench remote`
(1 piece, then N pieces, --rounds times). Each round's ratio is N-piece GB/s over 1-piece GB/s
of that round; the summary is the median over rounds with the spread.

Usage: /usr/bin/python3 bench/pieces_ratio.py [--tierkv ./build/tierkv] [--rounds 5]
           [--pieces 64] [--size 2MiB] [--reps 3] [--working-set 256MiB]
Output: one JSON line per path and round ({"bench":"pieces","path":"shm-put",...}), then one
summary line per path ({"op":"summary","ratio":...,"ratio_min":...,"ratio_max":...,
"target_ratio":0.9,"pass":...}) on stdout; a table on stderr. Exit 1 when a bench fails.
"""

import argparse
import json
import statistics
import sys

from bench_runs import BenchFailed, run_rows

TARGET = 0.9


def run_bench(args, bench, pieces):
    """{path: GB/s} of one run of `bench` with `pieces` buffers per object."""
    cmd = [args.tierkv, "bench", bench, "--json", "--reps", str(args.reps), "--sizes", args.size,
           "--pieces", str(pieces)]
    if bench == "remote":
        cmd += ["--working-set", args.working_set]
    rows = run_rows(cmd)
    return {f"{path}-{op}": d["gbps"] for (path, op, _), d in rows.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tierkv", default="./build/tierkv")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pieces", type=int, default=64)
    ap.add_argument("--size", default="2MiB")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--working-set", default="256MiB")
    args = ap.parse_args()
    ratios = {}
    try:
        for rnd in range(1, args.rounds + 1):
            for bench in ("embedded", "remote"):
                one = run_bench(args, bench, 1)
                many = run_bench(args, bench, args.pieces)
                for path in sorted(one.keys() & many.keys()):
                    ratio = many[path] / one[path] if one[path] > 0 else 0.0
                    ratios.setdefault(path, []).append(ratio)
                    print(json.dumps({"bench": "pieces", "path": path, "round": rnd,
                                      "pieces": args.pieces, "object": args.size,
                                      "gbps_one_piece": one[path],
                                      "gbps_pieces": many[path], "ratio": round(ratio, 3)}),
                          flush=True)
    except BenchFailed as e:
        print(f"pieces_ratio: {e}", file=sys.stderr)
        return 1
    print(f"{args.size} objects in {args.pieces} pieces vs 1 piece, {args.rounds} paired rounds",
          file=sys.stderr)
    for path, r in ratios.items():
        med = statistics.median(r)
        print(json.dumps({"bench": "pieces", "op": "summary", "path": path, "rounds": len(r),
                          "ratio": round(med, 3), "ratio_min": round(min(r), 3),
                          "ratio_max": round(max(r), 3), "target_ratio": TARGET,
                          "pass": med >= TARGET}))
        print(f"  {path:14} {med:.2f} ({min(r):.2f}-{max(r):.2f})  target {TARGET}: "
              f"{'PASS' if med >= TARGET else 'FAIL'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
