"""A PNG of throughput against object size (issue 27): the per-size JSON lines of
`tierkv bench embedded --json` and `tierkv bench remote --json` (run with the same --sizes),
put and get for embedded, shm and tcp, with memcpy and raw TCP at its best (the baselines
measured in the same runs) as lines. gnuplot, log2 size axis.

Usage: /usr/bin/python3 bench/size_curve_plot.py RESULTS.jsonl [MORE.jsonl ...] OUT.png
Exit 1 (with the reason) when no per-size line is found or gnuplot fails.
"""

import json
import os
import subprocess
import sys
import tempfile

# (series name, how to pick a line's figure); a line is one object size of one path.
SERIES = [
    ("embedded put", lambda d: d["gbps"] if d["bench"] == "embedded" and d["op"] == "put" else None),
    ("embedded get", lambda d: d["gbps"] if d["bench"] == "embedded" and d["op"] == "get" else None),
    ("shm put", lambda d: d["gbps"] if d.get("transport") == "shm" and d["op"] == "put" else None),
    ("shm get", lambda d: d["gbps"] if d.get("transport") == "shm" and d["op"] == "get" else None),
    ("tcp put", lambda d: d["gbps"] if d.get("transport") == "tcp" and d["op"] == "put" else None),
    ("tcp get", lambda d: d["gbps"] if d.get("transport") == "tcp" and d["op"] == "get" else None),
    ("memcpy", lambda d: d.get("memcpy_gbps") if d["bench"] == "embedded"
     else (d.get("baseline_gbps") if d.get("baseline") == "memcpy" else None)),
    ("raw TCP (one stream)",
     lambda d: d.get("baseline_gbps") if d.get("baseline") == "tcp_raw" else None),
]


def per_size_lines(paths):
    """The per-size lines of the embedded and remote benches in `paths`."""
    out = []
    for path in paths:
        with open(path) as f:
            for line in f:
                try:
                    d = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(d, dict) or d.get("op") not in ("put", "get"):
                    continue
                if d.get("bench") in ("embedded", "remote") and "object_bytes" in d:
                    out.append(d)
    return out


def table(lines):
    """{series: {object_bytes: GB/s}}; a baseline seen at one size in several lines keeps the
    mean of them (each run measured it once per size)."""
    sums = {}
    for d in lines:
        for name, pick in SERIES:
            value = pick(d)
            if value is None:
                continue
            cell = sums.setdefault(name, {}).setdefault(d["object_bytes"], [])
            cell.append(float(value))
    return {name: {size: sum(v) / len(v) for size, v in cells.items()}
            for name, cells in sums.items()}


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    inputs, png = argv[1:-1], argv[-1]
    lines = per_size_lines(inputs)
    if not lines:
        print(f"{', '.join(inputs)}: no per-size lines of bench embedded or remote",
              file=sys.stderr)
        return 1
    series = table(lines)
    with tempfile.TemporaryDirectory() as tmp:
        plots = []
        for i, (name, _) in enumerate(SERIES):
            if name not in series:
                continue
            data = os.path.join(tmp, f"s{i}.dat")
            with open(data, "w") as f:
                for size in sorted(series[name]):
                    f.write(f"{size / 1024:g} {series[name][size]:g}\n")
            style = "lines dt 2 lw 2" if name in ("memcpy", "raw TCP (one stream)") else \
                "linespoints"
            plots.append(f"'{data}' using 1:2 with {style} title '{name}'")
        script = f"""set terminal pngcairo size 1000,650 noenhanced
set output '{os.path.abspath(png)}'
set logscale x 2
set xlabel 'object size (KiB)'
set ylabel 'GB/s'
set yrange [0:*]
set key outside right top
set grid
plot {', '.join(plots)}
"""
        p = subprocess.run(["gnuplot"], input=script.encode(), capture_output=True)
        if p.returncode != 0:
            sys.stderr.write(p.stderr.decode())
            return 1
    print(png)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
