"""bench/paired_ab.py: paired, alternating runs of two variants of one bench, with a stand-in for
`tierkv` that reports figures chosen by the variant's environment, so the B/A ratios, the order
of the runs and the failure paths are known exactly."""

import json
import os
import stat
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "bench", "paired_ab.py")

# A stand-in for `tierkv bench ...`: per-size lines of bench remote (one per-rep line and a
# summary that must be ignored) or bench disk-remote's one line; GB/s = FAKE_GBPS (env) or 1.0,
# doubled by a --fast argument; each call appends its variant to FAKE_LOG; FAKE_FAIL fails.
FAKE = r'''#!/usr/bin/python3
import json, os, sys
if os.environ.get("FAKE_FAIL"):
    print("boom", file=sys.stderr)
    sys.exit(3)
gbps = float(os.environ.get("FAKE_GBPS", "1.0")) * (2.0 if "--fast" in sys.argv else 1.0)
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(("fast" if "--fast" in sys.argv else "slow") + "\n")
if sys.argv[2] == "disk-remote":
    print(json.dumps({"bench": "disk_remote", "object_bytes": 2097152, "load_gbps": gbps,
                      "remote_load_ratio": gbps / 4}))
    sys.exit(0)
for op in ("put", "get"):
    print(json.dumps({"bench": "remote", "transport": "shm", "op": op, "rep": 1,
                      "object_bytes": 65536, "gbps": 99.0}))
    print(json.dumps({"bench": "remote", "transport": "shm", "op": op, "object_bytes": 65536,
                      "gbps": gbps, "ratio": gbps / 10}))
print(json.dumps({"bench": "remote", "object_bytes": 65536, "shm_get_ratio": 0.1}))
'''


def fake_tierkv(tmp_path):
    path = tmp_path / "tierkv"
    path.write_text(FAKE)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def run(tmp_path, *args, env=None):
    full_env = dict(os.environ)
    full_env["FAKE_LOG"] = str(tmp_path / "log")
    full_env.update(env or {})
    return subprocess.run([sys.executable, SCRIPT, "--tierkv", fake_tierkv(tmp_path)] + list(args),
                          capture_output=True, text=True, env=full_env)


def summaries(stdout):
    return {(d["path"], d["operation"]): d for d in map(json.loads, stdout.splitlines())
            if d.get("op") == "summary"}


def test_b_over_a_per_row_with_the_order_alternating(tmp_path):
    p = run(tmp_path, "--rounds", "3", "--b-args=--fast", "--", "remote", "--sizes", "64KiB")
    assert p.returncode == 0, p.stderr
    rows = summaries(p.stdout)
    assert set(rows) == {("shm", "put"), ("shm", "get")}  # per-rep lines and summaries ignored
    for d in rows.values():
        assert d["rounds"] == 3 and d["object"] == "64KiB"
        assert d["b_over_a"] == 2.0 and d["b_over_a_min"] == 2.0 and d["b_over_a_max"] == 2.0
        assert d["gbps_a"] == 1.0 and d["gbps_b"] == 2.0
        assert d["ratio_a"] == 0.1 and d["ratio_b"] == 0.2
    # A then B, B then A, A then B.
    assert (tmp_path / "log").read_text().split() == ["slow", "fast", "fast", "slow", "slow", "fast"]
    assert "shm       put    64KiB" in p.stderr


def test_variants_by_environment_and_the_disk_remote_line(tmp_path):
    p = run(tmp_path, "--rounds", "2", "--a-env", "FAKE_GBPS=2", "--b-env", "FAKE_GBPS=3",
            "--", "disk-remote", "--reps", "1")
    assert p.returncode == 0, p.stderr
    d = summaries(p.stdout)[("tcp", "load")]
    assert d["b_over_a"] == 1.5 and d["ratio_a"] == 0.5 and d["ratio_b"] == 0.75


def test_a_failing_run_is_exit_1_naming_the_command(tmp_path):
    p = run(tmp_path, "--rounds", "1", "--", "remote", env={"FAKE_FAIL": "1"})
    assert p.returncode == 1
    assert "failed (3)" in p.stderr and "boom" in p.stderr


def test_bad_arguments_are_exit_2(tmp_path):
    assert run(tmp_path, "--rounds", "1").returncode == 2  # no bench named
    assert run(tmp_path, "--a-env", "NOEQUALS", "--", "remote").returncode == 2
    assert run(tmp_path, "--rounds", "0", "--", "remote").returncode == 2
