"""A PNG of `tierkv bench metadata --scale --json` output: memory per object, throughput,
eviction cost and recovery time against the number of objects (gnuplot, log-log).

Usage: /usr/bin/python3 bench/metadata_scale_plot.py RESULTS.jsonl OUT.png
"""

import json
import os
import subprocess
import sys
import tempfile


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    rows = []
    with open(argv[1]) as f:
        for line in f:
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("bench") == "metadata-scale" and d.get("op") == "size":
                rows.append(d)
    if not rows:
        print(f"{argv[1]}: no metadata-scale size lines", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "scale.dat")
        with open(data, "w") as f:
            for r in rows:
                f.write(" ".join(str(r.get(k, "NaN")) for k in (
                    "objects", "bytes_per_object", "put_keys_per_s", "exist_keys_per_s",
                    "get_keys_per_s", "evict_us_per_object", "recovery_s")) + "\n")
        script = f"""set terminal pngcairo size 1000,900 noenhanced
set output '{os.path.abspath(argv[2])}'
set multiplot layout 2,2
set logscale x
set xrange [30000:30000000]
set xlabel 'objects'
set key left top
set ylabel 'bytes per object (master RSS)'
set yrange [0:*]
plot '{data}' using 1:2 with linespoints title 'measured', 200 with lines title 'target'
set logscale y
set yrange [*:*]
set ylabel 'keys/s'
plot '{data}' using 1:4 with linespoints title 'exists', \\
     '{data}' using 1:5 with linespoints title 'get replicas', \\
     '{data}' using 1:3 with linespoints title 'put'
set ylabel 'us per evicted object'
plot '{data}' using 1:6 with linespoints title 'eviction round'
set ylabel 'recovery seconds'
plot '{data}' using 1:7 with linespoints title 'restart recovery', 30 with lines title 'target'
unset multiplot
"""
        p = subprocess.run(["gnuplot"], input=script.encode(), capture_output=True)
        if p.returncode != 0:
            sys.stderr.write(p.stderr.decode())
            return 1
    print(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
