"""`tierkv bench soak`: a cluster under a mixed load for a while, with chaos.

Hosts in network namespaces (scripts/netns_cluster.py; root), or every process on 127.0.0.1
with ``--loopback``: etcd, 3 masters on it (a leader, 2 standbys), 3 stores (the third with an
SSD tier), and requester processes (bench/soak_worker.py) on hosts of their own doing batched
puts (with and without eviction groups, replica_num 2 for a share), gets of hits and misses,
removes and upserts, every byte read checked. The stores' DRAM is far smaller than the
working set: eviction (and, on the third store, demotion) never stops. A chaos thread kills
(-9) and restarts, or stops (SIGSTOP) and resumes, stores and masters, and — with namespaces —
cuts and heals links (store-requester, store-masters, master-etcd).

Every result is accounted for: bytes that are not a version the key may hold are
``wrong_bytes`` (must be 0); a hit on a key removed for sure is ``resurrected``; a miss is
expected (evicted, removed or lost with a killed store); any other error is expected when it
falls within a chaos event (from its start to its end plus ``--grace``), counted by that
event's kind, and otherwise is an ``unexpected_error`` (must be 0). Resident memory and open
file descriptors of every process are sampled every 10 s (``rss_growth_pct``: growth from
the 2-minute sample to the last, for processes that lived past 2 minutes, with the MiB beside it
in ``rss_mib_first_max_last``); p50/p99 latency per
operation per minute; a PNG of throughput, latency and memory over time (gnuplot).

Summary (``--json``: the last line): {"bench":"soak", "duration_s", "mode", "ops",
"ops_total", "wrong_bytes", "resurrected", "unexpected_errors", "expected_errors",
"chaos_events", "rss_growth_pct_max", "fd_growth_max", "latency_ms", "plot", ...}.
Exit status 1 when wrong_bytes, resurrected or unexpected_errors is not 0.
"""

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "scripts"))

import netns_cluster  # noqa: E402
import netns_services as sv  # noqa: E402

CHAOS_KINDS = ("kill_store", "stop_store", "kill_master", "stop_master", "kill_requester",
               "stop_requester", "cut_store_requester", "cut_store_masters", "cut_master_etcd")
SAMPLE_S = 10
GROWTH_FROM_S = 120


def parse_duration(text):
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r}: a duration such as 120s, 30m, 2h")
    scale = {"ms": 0.001, "s": 1, None: 1, "m": 60, "h": 3600}[m.group(2)]
    value = float(m.group(1)) * scale
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be positive")
    return value


class Soak:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        hosts = ["e", "m1", "m2", "m3", "s1", "s2", "s3"] + \
            [f"r{i + 1}" for i in range(a.requesters)]
        self.net = (netns_cluster.Loopback(hosts, a.out) if a.loopback
                    else netns_cluster.Cluster(hosts, a.out))
        self.events = []           # {"t0", "t1", "kind", "target"}
        self.samples = []          # (t, name, rss_kb, fds)
        self.procs = {}            # name -> Proc (current incarnation)
        self.incarnation = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.master_ports = {}
        self.records = []

    # ---- set-up ------------------------------------------------------------------------

    def _name(self, role):
        n = self.incarnation.get(role, 0) + 1
        self.incarnation[role] = n
        return f"{role}#{n}"

    def start(self):
        net = self.net.up()
        if self.a.loopback:
            eport, pport = sv.free_port(), sv.free_port()
            _, self.etcd = sv.start_etcd(net, "e", eport, pport)
        else:
            _, self.etcd = sv.start_etcd(net, "e")
        for m in ("m1", "m2", "m3"):
            self.master_ports[m] = sv.free_port() if self.a.loopback else sv.MASTER_PORT
            self._start_master(m)
        self.master = f"etcd://{self.etcd}"
        for s in ("s1", "s2", "s3"):
            self._start_store(s)
        self.workers = {}  # host -> its current worker process
        self.all_workers = []  # every incarnation, with its reader thread
        self.killed = set()  # pids the chaos killed (their exit status is no failure)
        self.worker_end = time.monotonic() + self.a.duration
        for i in range(self.a.requesters):
            self._start_worker(f"r{i + 1}")

    def _start_worker(self, host):
        """A requester on `host`; a restarted one works on new keys (the killed one's
        knowledge of its keys' versions died with it) for what is left of the duration."""
        i = int(host[1:]) - 1
        n = self.incarnation.get(f"worker:{host}", 0) + 1
        conf = {"local_hostname": self.net.ip(host), "metadata_server": "P2PHANDSHAKE",
                "global_segment_size": 0, "local_buffer_size": "16MB", "protocol": "tcp",
                "master_server_address": self.master}
        left = max(1.0, self.worker_end - time.monotonic())
        name = f"w{i + 1}" if n == 1 else f"w{i + 1}.{n}"
        argv = [sv.PYTHON, os.path.join(HERE, "soak_worker.py"), "--name", name,
                "--config", json.dumps(conf), "--seed", str(self.a.seed * 100 + i + 1000 * n),
                "--duration", str(left), "--keyspace", str(self.a.keyspace)]
        p = self.net.spawn(host, argv, name="worker", env={"PYTHONPATH": sv.python_dir()},
                           stdout=subprocess.PIPE)
        self.procs[self._name(f"worker:{host}")] = p
        self.workers[host] = p
        th = threading.Thread(target=self._read_worker, args=(p,), daemon=True)
        th.start()
        self.all_workers.append((p, th))
        return p

    def _read_worker(self, p):
        for line in p.popen.stdout:
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            rec["worker"] = p.host
            with self.lock:
                self.records.append(rec)

    def _start_master(self, host):
        p = sv.start_master(self.net, host, self.etcd, lease_ttl_s=2,
                            client_ttl_ms=self.a.client_ttl_ms, port=self.master_ports[host],
                            extra=["--lease-ttl-ms", str(self.a.lease_ttl_ms)])
        self.procs[self._name(f"master:{host}")] = p
        return p

    def _start_store(self, host):
        extra = []
        if host == "s3":  # the SSD tier: eviction demotes here
            cfg = os.path.join(self.net.workdir, f"store-{host}.json")
            with open(cfg, "w") as f:
                json.dump({"enable_offload": True,
                           "offload_paths": [os.path.join(self.net.workdir, f"{host}.tier")],
                           "offload_capacity": self.a.ssd_capacity}, f)
            extra = ["--config", cfg]
        p, _ = sv.start_store(self.net, host, self.master, segment=self.a.segment, extra=extra)
        self.procs[self._name(f"store:{host}")] = p
        return p

    def _current(self, role_host):
        found = [(n, p) for n, p in self.procs.items() if n.startswith(role_host + "#")]
        return max(found, key=lambda x: int(x[0].split("#")[1]))[1] if found else None

    # ---- chaos ---------------------------------------------------------------------------

    def chaos(self):
        kinds = [k for k in self.a.chaos_kinds if self.net.can_cut or not k.startswith("cut_")]
        if not kinds:
            return
        while not self.stop.wait(self.rng.uniform(0.5, 1.5) * self.a.chaos_every):
            kind = self.rng.choice(kinds)
            t0 = time.monotonic()
            try:
                target = getattr(self, "_" + kind)()
            except Exception as e:  # a failed restart is itself a finding: recorded
                target = f"failed: {e}"[:300]
            with self.lock:
                self.events.append({"t0": t0, "t1": time.monotonic(), "kind": kind,
                                    "target": target})

    def _hold(self):
        self.stop.wait(self.rng.uniform(2, 6))

    def _kill_store(self):
        host = self.rng.choice(["s1", "s2", "s3"])
        self._current(f"store:{host}").kill()
        self._hold()
        if host == "s3":  # a killed store's tier file is its own: a restart makes a new one
            path = os.path.join(self.net.workdir, f"{host}.tier")
            if os.path.exists(path):
                os.unlink(path)
        self._start_store(host)
        return host

    def _stop_store(self):
        host = self.rng.choice(["s1", "s2", "s3"])
        p = self._current(f"store:{host}")
        p.signal(signal.SIGSTOP)
        self._hold()
        p.signal(signal.SIGCONT)
        return host

    def _kill_master(self):
        host = self.rng.choice(["m1", "m2", "m3"])
        self._current(f"master:{host}").kill()
        self._hold()
        self._start_master(host)
        return host

    def _stop_master(self):
        host = self.rng.choice(["m1", "m2", "m3"])
        p = self._current(f"master:{host}")
        p.signal(signal.SIGSTOP)
        self._hold()
        p.signal(signal.SIGCONT)
        return host

    def _kill_requester(self):
        host = self.rng.choice(sorted(self.workers))
        p = self.workers[host]
        if not p.alive():
            return f"{host} (done)"
        self.killed.add(p.pid)
        p.kill()
        self._hold()
        if time.monotonic() < self.worker_end - 5:
            self._start_worker(host)
        return host

    def _stop_requester(self):
        host = self.rng.choice(sorted(self.workers))
        p = self.workers[host]
        p.signal(signal.SIGSTOP)
        self._hold()
        p.signal(signal.SIGCONT)
        return host

    def _cut_store_requester(self):
        s = self.rng.choice(["s1", "s2", "s3"])
        r = f"r{self.rng.randrange(self.a.requesters) + 1}"
        self.net.cut(s, r)
        self._hold()
        self.net.heal(s, r)
        return f"{s}-{r}"

    def _cut_store_masters(self):
        s = self.rng.choice(["s1", "s2", "s3"])
        for m in ("m1", "m2", "m3"):
            self.net.cut(s, m)
        self._hold()
        for m in ("m1", "m2", "m3"):
            self.net.heal(s, m)
        return s

    def _cut_master_etcd(self):
        m = self.rng.choice(["m1", "m2", "m3"])
        self.net.cut(m, "e")
        self._hold()
        self.net.heal(m, "e")
        return m

    # ---- sampling ------------------------------------------------------------------------

    def sample(self):
        while not self.stop.wait(SAMPLE_S):
            now = time.monotonic()
            for name, p in list(self.procs.items()):
                if not p.alive():
                    continue
                try:
                    with open(f"/proc/{p.pid}/status") as f:
                        rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
                    fds = len(os.listdir(f"/proc/{p.pid}/fd"))
                except (OSError, AttributeError):
                    continue
                self.samples.append((now, name, rss, fds))

    # ---- the run -------------------------------------------------------------------------

    def run(self):
        self.t_start = time.monotonic()
        threads = [threading.Thread(target=self.sample, daemon=True)]
        if not self.a.no_chaos:
            threads.append(threading.Thread(target=self.chaos, daemon=True))
        for th in threads:
            th.start()
        deadline = self.t_start + self.a.duration + 120  # workers stop on their own
        # Until every host's current worker is done (the chaos may replace one meanwhile).
        while time.monotonic() < deadline and any(p.alive() for p in self.workers.values()):
            time.sleep(0.5)
        self.stop.set()
        for th in threads:
            th.join(30)
        for p, th in list(self.all_workers):
            try:
                p.popen.wait(max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
            th.join(30)
            if p.popen.returncode != 0 and p.pid not in self.killed:
                with self.lock:
                    self.records.append({"worker": p.host, "fatal": f"exit status "
                                         f"{p.popen.returncode}: {p.log()[-300:]}"})
        self.t_end = time.monotonic()
        return self.records

    def close(self):
        self.net.down()


# ---- accounting -------------------------------------------------------------------------


def percentile(values, q):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * len(v)))]


def account(records, events, grace, t_start):
    ops, expected, unexpected = {}, {}, []
    wrong, resurrected = [], []
    per_second, lat_minute = {}, {}
    for rec in records:
        if "fatal" in rec:
            unexpected.append({"t": None, "worker": rec["worker"], "fatal": rec["fatal"]})
            continue
        t = rec["t"]
        sec = int(t - t_start)
        for w in rec.get("wrong", []):
            wrong.append(dict(w, t=round(w.get("t", t) - t_start, 1), worker=rec["worker"]))
        for op_result, n in rec.get("ops", {}).items():
            op, result = op_result.split("/", 1)
            ops.setdefault(op, {})
            ops[op][result] = ops[op].get(result, 0) + n
            per_second[sec] = per_second.get(sec, 0) + n
            if result in ("ok", "miss", "not_found"):
                continue
            if result == "wrong":
                continue  # counted from the records' details
            causes = sorted({e["kind"] for e in events
                             if e["t0"] - 1.0 <= t <= e["t1"] + grace})
            if result == "resurrected":
                resurrected.append({"t": round(t - t_start, 1), "worker": rec["worker"],
                                    "during": causes})
                continue
            if causes:
                key = "+".join(causes)
                expected[key] = expected.get(key, 0) + n
            else:
                unexpected.append({"t": round(t - t_start, 1), "worker": rec["worker"],
                                   "op": op, "result": result, "count": n})
        minute = int((t - t_start) // 60)
        for op, ms in rec.get("lat", {}).items():
            lat_minute.setdefault((op, minute), []).extend(ms)
    return ops, expected, unexpected, wrong, resurrected, per_second, lat_minute


def growth(samples):
    """Per process incarnation: RSS growth (%) and fd growth from its first sample at or after
    GROWTH_FROM_S of its life to its last sample."""
    by = {}
    for t, name, rss, fds in samples:
        by.setdefault(name, []).append((t, rss, fds))
    rss_g, fd_g, rss_mib = {}, {}, {}
    for name, ss in by.items():
        first_t = ss[0][0]
        later = [s for s in ss if s[0] - first_t >= GROWTH_FROM_S - SAMPLE_S]
        if len(later) < 2:
            continue
        rss_g[name] = round(100.0 * (later[-1][1] - later[0][1]) / max(1, later[0][1]), 2)
        fd_g[name] = later[-1][2] - later[0][2]
        # Absolute figures beside the percentage: a standby master that becomes the leader
        # grows by the table it takes over (a role change, not a leak), from a few MiB.
        rss_mib[name] = [round(later[0][1] / 1024.0, 1),
                         round(max(s[1] for s in later) / 1024.0, 1),
                         round(later[-1][1] / 1024.0, 1)]
    return rss_g, fd_g, rss_mib


def plot(out, per_second, lat_minute, samples, t_start):
    """A PNG of throughput (ops/s), p99 latency per minute and RSS over time (gnuplot)."""
    gp = shutil.which("gnuplot")
    if gp is None:
        return None
    with open(os.path.join(out, "soak_ops.dat"), "w") as f:
        for sec in sorted(per_second):
            f.write(f"{sec} {per_second[sec]}\n")
    ops = sorted({op for op, _ in lat_minute})
    with open(os.path.join(out, "soak_latency.dat"), "w") as f:
        for minute in sorted({m for _, m in lat_minute}):
            f.write(f"{minute} " + " ".join(
                str(percentile(lat_minute.get((op, minute), []), 0.99) or "NaN")
                for op in ops) + "\n")
    roles = sorted({name.split(":")[0] for _, name, _, _ in samples})
    with open(os.path.join(out, "soak_rss.dat"), "w") as f:
        for t in sorted({t for t, _, _, _ in samples}):
            at = [s for s in samples if s[0] == t]
            f.write(f"{t - t_start:.0f} " + " ".join(
                str(sum(s[2] for s in at if s[1].startswith(r + ":")) / 1024.0)
                for r in roles) + "\n")
    png = os.path.join(out, "soak.png")
    lat_plots = ", ".join(f"'soak_latency.dat' using 1:{i + 2} with linespoints title '{op}'"
                          for i, op in enumerate(ops)) or "0 notitle"
    rss_plots = ", ".join(f"'soak_rss.dat' using 1:{i + 2} with lines title '{r}'"
                          for i, r in enumerate(roles)) or "0 notitle"
    script = f"""set terminal pngcairo size 1000,1000 noenhanced
set output '{png}'
set multiplot layout 3,1
set xlabel 'seconds'
set ylabel 'operations / s'
plot 'soak_ops.dat' using 1:2 with lines title 'all operations'
set xlabel 'minute'
set ylabel 'p99 latency (ms)'
set logscale y
plot {lat_plots}
unset logscale y
set xlabel 'seconds'
set ylabel 'RSS (MiB, sum per role)'
plot {rss_plots}
unset multiplot
"""
    p = subprocess.run([gp], input=script.encode(), cwd=out, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    if p.returncode != 0:
        script = script.replace("pngcairo", "png")
        p = subprocess.run([gp], input=script.encode(), cwd=out, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE)
    return png if p.returncode == 0 and os.path.exists(png) else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tierkv", help="the tierkv executable (set by `tierkv bench soak`)")
    ap.add_argument("--duration", type=parse_duration, default=parse_duration("120s"),
                    help="how long the load runs: 120s, 30m, 2h (default 120s)")
    ap.add_argument("--loopback", action="store_true",
                    help="every process on 127.0.0.1 (no namespaces, no link cuts)")
    ap.add_argument("--requesters", type=int, default=8)
    ap.add_argument("--segment", default="128MiB", help="DRAM per store (default 128MiB)")
    ap.add_argument("--lease-ttl-ms", type=int, default=2000,
                    help="the masters' read lease (default 2000: leased objects cannot be "
                         "evicted, and a soak reads fast enough to lease a small pool whole)")
    ap.add_argument("--ssd-capacity", default="256MiB", help="the third store's SSD tier")
    ap.add_argument("--keyspace", type=int, default=1500, help="keys each requester holds")
    ap.add_argument("--chaos-every", type=parse_duration, default=parse_duration("10s"),
                    help="mean time between chaos events (default 10s)")
    ap.add_argument("--no-chaos", action="store_true")
    ap.add_argument("--chaos-kinds", default=",".join(CHAOS_KINDS),
                    help="comma-separated, of: " + ", ".join(CHAOS_KINDS) + " (default: all; "
                         "the cut_* ones need namespaces)")
    ap.add_argument("--grace", type=parse_duration, default=parse_duration("15s"),
                    help="errors this long after a chaos event ends are still its own")
    ap.add_argument("--client-ttl-ms", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", help="directory for logs, data and the PNG (default: a new one "
                                  "under /tmp)")
    ap.add_argument("--json", action="store_true", help="JSON lines on stdout")
    a = ap.parse_args(argv)
    if a.tierkv:
        os.environ["TIERKV_BIN"] = a.tierkv
    if a.requesters < 1:
        ap.error("--requesters must be >= 1")
    a.chaos_kinds = [k for k in a.chaos_kinds.split(",") if k]
    bad = sorted(set(a.chaos_kinds) - set(CHAOS_KINDS))
    if bad:
        ap.error(f"--chaos-kinds: unknown {bad} (known: {', '.join(CHAOS_KINDS)})")
    if not a.loopback:
        why = netns_cluster.unavailable()
        if why:
            print(f"tierkv bench soak: {why}; --loopback runs without namespaces",
                  file=sys.stderr)
            return 2
    a.out = os.path.abspath(a.out or f"/tmp/tierkv-soak-{os.getpid()}")
    os.makedirs(a.out, exist_ok=True)
    soak = Soak(a)
    try:
        soak.start()
        records = soak.run()
    finally:
        soak.close()
    ops, expected, unexpected, wrong, resurrected, per_second, lat_minute = account(
        records, soak.events, a.grace, soak.t_start)
    rss_g, fd_g, rss_mib = growth(soak.samples)
    latency = {}
    for (op, minute), ms in sorted(lat_minute.items()):
        latency.setdefault(op, []).append({"minute": minute, "p50": percentile(ms, 0.5),
                                           "p99": percentile(ms, 0.99), "n": len(ms)})
    kinds = {}
    for e in soak.events:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    failed_chaos = [e for e in soak.events if str(e["target"]).startswith("failed")]
    png = plot(a.out, per_second, lat_minute, soak.samples, soak.t_start)
    summary = {
        "bench": "soak", "mode": "loopback" if a.loopback else "netns",
        "duration_s": round(soak.t_end - soak.t_start, 1), "requesters": a.requesters,
        "ops": ops, "ops_total": sum(sum(r.values()) for r in ops.values()),
        "wrong_bytes": len(wrong), "wrong": wrong[:10],
        "resurrected": len(resurrected), "resurrections": resurrected[:10],
        "unexpected_errors": sum(u.get("count", 1) for u in unexpected),
        "unexpected": unexpected[:20], "expected_errors": expected,
        "chaos_events": kinds, "chaos_failed": failed_chaos[:5],
        "rss_growth_pct_max": max(rss_g.values()) if rss_g else None,
        "rss_growth_pct": rss_g, "rss_mib_first_max_last": rss_mib,
        "fd_growth_max": max(fd_g.values()) if fd_g else None,
        "latency_ms": latency, "plot": png, "out": a.out,
    }
    if a.json:
        for e in soak.events:
            print(json.dumps({"bench": "soak", "event": e["kind"], "target": e["target"],
                              "t0": round(e["t0"] - soak.t_start, 2),
                              "t1": round(e["t1"] - soak.t_start, 2)}))
        print(json.dumps(summary), flush=True)
    out = sys.stderr if a.json else sys.stdout
    print(f"soak ({summary['mode']}, {summary['duration_s']} s, {a.requesters} requesters): "
          f"{summary['ops_total']} operations; wrong bytes {summary['wrong_bytes']}, "
          f"resurrected {summary['resurrected']}, unexpected errors "
          f"{summary['unexpected_errors']}; chaos {kinds or 'none'}; expected errors "
          f"{expected or 'none'}; RSS growth max {summary['rss_growth_pct_max']} %; "
          f"plot {png}", file=out)
    for op, rows in latency.items():
        print(f"  {op}: " + ", ".join(f"min {r['minute']} p50 {r['p50']} p99 {r['p99']} ms"
                                      for r in rows[:3]) + (" ..." if len(rows) > 3 else ""),
              file=out)
    bad = summary["wrong_bytes"] or summary["resurrected"] or summary["unexpected_errors"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
