"""Running `tierkv bench ...` from the scripts beside it (pieces_ratio.py, paired_ab.py,
speed_table.py): one run's JSON lines, or its per-row results keyed by path, operation and
object size."""

import json
import os
import subprocess


class BenchFailed(RuntimeError):
    pass


def run_json(cmd, env=None, log=None):
    """The JSON lines `cmd` printed on stdout (lines that are not JSON are skipped), with `env`
    added to the environment; `log`, if given, hears the command line first. Raises BenchFailed
    with the command's stderr tail when it fails."""
    if log:
        log("  $ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(os.environ, **env) if env else None)
    if p.returncode != 0:
        raise BenchFailed(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()[-600:]}")
    lines = []
    for text in p.stdout.splitlines():
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            pass  # a bench's stray non-JSON output
    return lines


def run_rows(cmd, env=None):
    """{(path, op, object_bytes): result line} of one run of `cmd` (a `tierkv bench ... --json`
    command line). path is the row's transport, or "embedded" for the embedded bench. Rows are
    the per-size result lines (put and get, with a measured gbps), not the per-rep ones or the
    summary; for `bench disk-remote`, its load ("tcp", "load", size) with remote_load_ratio.
    Raises BenchFailed as run_json does."""
    rows = {}
    for d in run_json(cmd, env):
        if d.get("op") in ("put", "get") and "rep" not in d and d.get("gbps") is not None:
            rows[(d.get("transport", "embedded"), d["op"], d.get("object_bytes", 0))] = d
        elif d.get("bench") == "disk_remote" and d.get("load_gbps") is not None:
            # bench disk-remote's one line: its load from the store's SSD tier, with the ratio
            # against min(fio read, raw TCP) of the same reps.
            rows[("tcp", "load", d.get("object_bytes", 0))] = {
                "gbps": d["load_gbps"], "ratio": d.get("remote_load_ratio")}
    return rows


def size_text(n):
    """65536 -> "64KiB", 2097152 -> "2MiB"."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return f"{n}B"
