"""bench/size_curve_plot.py: a PNG from the per-size lines of bench embedded and bench remote,
and a clear failure when there is nothing to plot."""

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "bench", "size_curve_plot.py")

sys.path.insert(0, os.path.join(REPO, "bench"))
import size_curve_plot  # noqa: E402


def lines():
    out = [{"bench": "embedded", "op": "ready"}]
    for size, scale in ((65536, 1.0), (2097152, 3.0)):
        for op in ("put", "get"):
            out.append({"bench": "embedded", "op": op, "object_bytes": size, "gbps": scale,
                        "memcpy_gbps": 10.0})
            out.append({"bench": "remote", "transport": "shm", "op": op, "object_bytes": size,
                        "gbps": scale / 2, "baseline": "memcpy", "baseline_gbps": 12.0})
            out.append({"bench": "remote", "transport": "tcp", "op": op, "object_bytes": size,
                        "gbps": scale / 4, "baseline": "tcp_raw", "baseline_gbps": 4.0})
    out.append({"bench": "remote", "object_bytes": 65536, "shm_get_ratio": 0.2})  # a summary
    return out


def test_series_pick_each_path_and_average_the_baselines():
    table = size_curve_plot.table(size_curve_plot.per_size_lines([]) + [
        d for d in lines() if d.get("op") in ("put", "get")])
    assert table["embedded get"] == {65536: 1.0, 2097152: 3.0}
    assert table["shm put"][2097152] == 1.5
    assert table["tcp get"][65536] == 0.25
    # memcpy from both benches at a size: their mean; raw TCP from the tcp lines only.
    assert table["memcpy"][65536] == 11.0
    assert table["raw TCP (one stream)"] == {65536: 4.0, 2097152: 4.0}


@pytest.mark.skipif(shutil.which("gnuplot") is None, reason="gnuplot is not installed")
def test_writes_a_png(tmp_path):
    results = tmp_path / "results.jsonl"
    results.write_text("not json\n" + "\n".join(json.dumps(d) for d in lines()) + "\n")
    png = tmp_path / "curve.png"
    p = subprocess.run([sys.executable, SCRIPT, str(results), str(png)], capture_output=True,
                       text=True)
    assert p.returncode == 0, p.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_nothing_to_plot_is_an_error(tmp_path):
    results = tmp_path / "empty.jsonl"
    results.write_text('{"bench": "disk", "op": "summary"}\n')
    p = subprocess.run([sys.executable, SCRIPT, str(results), str(tmp_path / "x.png")],
                       capture_output=True, text=True)
    assert p.returncode == 1
    assert "no per-size lines" in p.stderr
