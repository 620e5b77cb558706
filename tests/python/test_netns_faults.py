"""tierkv across a network: hosts in network namespaces (scripts/netns_cluster.py), links cut
one way or both, shaped, and healed, with every byte read checked (each object's content derives
from its key and version: scripts/netns_requester.py). Needs root (CI runs as root); skipped
with the reason otherwise."""

import os
import sys
import threading
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts"))

import netns_cluster  # noqa: E402
import netns_services as sv  # noqa: E402

_why = netns_cluster.unavailable()
pytestmark = pytest.mark.skipif(_why is not None, reason=_why or "")

SIZE = 64 << 10
NOT_FOUND = -704
CLIENT_TTL_MS = 3000


def _versions(keys, v=1):
    return {k: [v] for k in keys}


def _assert_never_wrong(results):
    assert "wrong" not in results and "empty" not in results, results


def _until(fn, timeout, step=0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(step)
    return fn()


@pytest.fixture
def netns(request):
    """A function making the test's cluster of hosts (torn down after the test; on failure
    every process's log tail is printed)."""
    made = []

    def make(hosts):
        c = netns_cluster.Cluster(hosts)
        made.append(c)
        return c.up()
    yield make
    for c in made:
        try:
            for p in c.procs:
                sys.stdout.write(f"---- {p.host}: {' '.join(p.argv)[:100]}\n{p.log()[-1500:]}\n")
        finally:
            c.down()


def _one_master_two_stores(netns):
    """Hosts m (a master), s1 and s2 (stores), r (a requester): (net, requester, s1's segment)."""
    net = netns(["m", "s1", "s2", "r"])
    master = f"{net.ip('m')}:{sv.MASTER_PORT}"
    sv.start_master(net, "m", client_ttl_ms=CLIENT_TTL_MS)
    _, seg1 = sv.start_store(net, "s1", master)
    sv.start_store(net, "s2", master)
    return net, sv.Requester(net, "r", master), seg1


def _store_keys(req, keys, segment):
    """The keys with a replica on the segment whose name starts with ``segment``."""
    return [k for k, where in zip(keys, req.call("where", keys=keys)["results"])
            if any(w.startswith(segment) for w in where)]


def test_a_store_cut_from_the_master_only_is_dropped_and_never_serves_after(netns):
    """The master drops a store it cannot hear after the client TTL; its objects are then
    misses (never its bytes, never wrong bytes) even though requesters still reach it; on heal
    it registers again and what it still holds is adopted or discarded, never read wrong."""
    net, r, seg1 = _one_master_two_stores(netns)
    keys = [f"a{i}" for i in range(48)]
    assert r.call("put", keys=keys, version=1, size=SIZE)["results"] == [0]
    on_s1 = _store_keys(r, keys, seg1)
    assert 0 < len(on_s1) < len(keys)
    assert r.call("get", keys=keys, versions=_versions(keys), size=SIZE)["results"] == \
        ["ok"] * len(keys)

    net.cut("s1", "m")
    dropped = _until(lambda: set(r.call("exist", keys=on_s1)["results"]) == {0},
                     timeout=CLIENT_TTL_MS / 1000 * 4)
    assert dropped, "the master still lists the cut store's objects"
    got = r.call("get", keys=on_s1, versions=_versions(on_s1), size=SIZE)["results"]
    assert set(got) == {NOT_FOUND}, got  # its bytes are no longer served
    # Puts meanwhile go to the store the master still hears.
    more = [f"b{i}" for i in range(16)]
    assert r.call("put", keys=more, version=1, size=SIZE)["results"] == [0]
    assert _store_keys(r, more, seg1) == []

    net.heal("s1", "m")
    tries = iter(range(1000))

    def puts_reach_s1_again():
        batch = [f"c{next(tries)}-{i}" for i in range(16)]  # new keys each try
        assert r.call("put", keys=batch, version=1, size=SIZE)["results"] == [0]
        return _store_keys(r, batch, seg1.split("@")[0])
    assert _until(puts_reach_s1_again, timeout=30), "no put reached the store after the heal"
    everything = keys + more
    got = r.call("get", keys=everything, versions=_versions(everything), size=SIZE)["results"]
    _assert_never_wrong(got)
    assert set(got) <= {"ok", NOT_FOUND}, got
    assert got[len(keys):] == ["ok"] * len(more)
    r.close()


@pytest.mark.parametrize("both_ways", [True, False], ids=["both-ways", "one-way"])
def test_a_requester_cut_from_a_store_fails_over_and_puts_route_around(netns, both_ways):
    """Replicas on a store the requester cannot reach (while the master still hears it): gets
    are served by the other replica within the transfer timeout, puts land elsewhere."""
    net, r, seg1 = _one_master_two_stores(netns)
    keys = [f"a{i}" for i in range(24)]
    assert r.call("put", keys=keys, version=1, size=SIZE, replica_num=2)["results"] == [0]
    assert len(_store_keys(r, keys, seg1)) == len(keys)

    net.cut("r", "s1", both=both_ways)
    t0 = time.monotonic()
    got = r.call("get", keys=keys, versions=_versions(keys), size=SIZE)["results"]
    assert got == ["ok"] * len(keys), got
    first_batch = time.monotonic() - t0
    more = [f"b{i}" for i in range(24)]
    rc = r.call("put", keys=more, version=1, size=SIZE)["results"]
    assert rc == [0], rc
    assert _store_keys(r, more, seg1) == []  # none on the store it cannot reach
    got = r.call("get", keys=more, versions=_versions(more), size=SIZE)["results"]
    assert got == ["ok"] * len(more)
    # The master still hears the store: it keeps its objects (other requesters reach them).
    assert len(_store_keys(r, keys, seg1)) == len(keys)
    assert first_batch < 30, f"failing over took {first_batch:.1f} s"
    # Healed: the requester connects to the store again (its connection died in the cut) and
    # places puts there again.
    net.heal("r", "s1", both=both_ways)
    tries = iter(range(1000))

    def puts_reach_s1_again():
        batch = [f"c{next(tries)}-{i}" for i in range(16)]
        assert r.call("put", keys=batch, version=1, size=SIZE)["results"] == [0]
        got = r.call("get", keys=batch, versions=_versions(batch), size=SIZE)["results"]
        assert got == ["ok"] * len(batch), got
        return _store_keys(r, batch, seg1)
    assert _until(puts_reach_s1_again, timeout=30), "no put reached the store after the heal"
    r.close()


def test_a_leader_cut_from_etcd_stops_before_the_standby_serves(netns):
    """The leader master loses etcd while clients still reach it: it stops accepting within
    its lease, the standby takes over, and no put is accepted by the old leader after the new
    one accepted one. r1 reaches only the old leader (its address, pinned); r2 follows etcd
    but cannot reach the old leader: whatever answers r1 is the old leader, r2 the new one."""
    net = netns(["e", "m1", "m2", "s1", "r1", "r2"])
    lease_s = 2
    _, ep = sv.start_etcd(net, "e")
    sv.start_master(net, "m1", ep, lease_ttl_s=lease_s, client_ttl_ms=CLIENT_TTL_MS)
    time.sleep(0.5)  # m1 wins the election
    sv.start_master(net, "m2", ep, lease_ttl_s=lease_s, client_ttl_ms=CLIENT_TTL_MS)
    sv.start_store(net, "s1", f"etcd://{ep}")
    r1 = sv.Requester(net, "r1", f"{net.ip('m1')}:{sv.MASTER_PORT}")
    r2 = sv.Requester(net, "r2", f"etcd://{ep}")
    assert r1.call("put", keys=["warm1"], version=1, size=SIZE)["results"] == [0]
    assert r2.call("put", keys=["warm2"], version=1, size=SIZE)["results"] == [0]
    net.cut("r1", "m2")
    net.cut("r1", "e")
    net.cut("r2", "m1")
    cut_at = time.monotonic()
    net.cut("m1", "e")
    log = {"r1": [], "r2": []}
    stop = threading.Event()

    def load(name, req):
        i = 0
        while not stop.is_set():
            k = f"{name}-{i}"
            i += 1
            t0 = time.monotonic()
            try:
                rc = req.call("put", keys=[k], version=1, size=4096, timeout=60)["results"][0]
            except Exception as e:  # a requester that died fails the test below
                rc = repr(e)
            log[name].append((t0, time.monotonic(), rc, k))
            time.sleep(0.02)

    threads = [threading.Thread(target=load, args=(n, q)) for n, q in (("r1", r1),
                                                                       ("r2", r2))]
    for t in threads:
        t.start()
    _until(lambda: any(rc == 0 and s > cut_at for s, _, rc, _ in log["r2"]), timeout=30)
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join()
    old = [(s, e) for s, e, rc, _ in log["r1"] if rc == 0 and s > cut_at]
    new = [(s, e) for s, e, rc, _ in log["r2"] if rc == 0 and s > cut_at]
    assert new, f"the standby never took over: {log['r2'][-3:]}"
    if old:
        last_old_start = max(s for s, _ in old)
        first_new_end = min(e for _, e in new)
        assert last_old_start <= first_new_end, (
            f"the old leader accepted a put {last_old_start - first_new_end:.3f} s after "
            "the new leader had")
        assert last_old_start - cut_at <= lease_s + 1.0, \
            f"the old leader kept accepting {last_old_start - cut_at:.1f} s after the cut"
    # What the new leader accepted is readable, byte for byte.
    keys = [k for _, _, rc, k in log["r2"] if rc == 0][:32]
    got = r2.call("get", keys=keys, versions=_versions(keys), size=4096)["results"]
    _assert_never_wrong(got)
    r1.close()
    r2.close()


def test_gets_over_a_slow_link_are_whole_or_fail_cleanly(netns):
    """One store behind a 200 Mbit/s link (tbf on both ends): 1 MiB gets finish within their
    lease or fail with LEASE_EXPIRED, never with wrong bytes."""
    net = netns(["m", "s1", "r"])
    master = f"{net.ip('m')}:{sv.MASTER_PORT}"
    sv.start_master(net, "m", client_ttl_ms=CLIENT_TTL_MS)
    sv.start_store(net, "s1", master, segment="96MiB")
    r = sv.Requester(net, "r", master)
    net.shape("s1", "200mbit", burst="64kb", latency="100ms")
    keys = [f"slow{i}" for i in range(24)]
    size = 1 << 20
    for i in range(0, len(keys), 8):  # 8 MiB per call: within the 16 MB local buffer
        assert r.call("put", keys=keys[i:i + 8], version=1, size=size,
                      timeout=180)["results"] == [0]
    t0 = time.monotonic()
    got = r.call("get", keys=keys, versions=_versions(keys), size=size, timeout=180)["results"]
    seconds = time.monotonic() - t0
    _assert_never_wrong(got)
    assert set(got) <= {"ok", -707}, got
    assert got.count("ok") >= len(keys) // 2
    # 24 MiB over 200 Mbit/s takes about 1 s: the link was really slow, and gets waited.
    assert seconds > 0.5, f"{seconds:.2f} s: the shaping did not hold"
    r.close()


def test_a_killed_run_is_cleaned_up_by_the_next(tmp_path):
    """A run whose process died (here: a child that made namespaces then was killed) leaves
    namespaces and processes that the next Cluster removes before it starts."""
    import subprocess
    code = ("import sys, time; sys.path.insert(0, %r); import netns_cluster as n; "
            "c = n.Cluster(['a', 'b']); c.up(); c.spawn('a', ['sleep', '600']); "
            "print(c.run, flush=True); time.sleep(600)") % os.path.dirname(netns_cluster.__file__)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    run = p.stdout.readline().strip()
    assert len(run) == 8
    p.kill()
    p.wait()
    left = [ns for ns in netns_cluster._namespaces() if run in ns]
    assert len(left) == 3  # a, b and the router: still there
    c = netns_cluster.Cluster(["x"])  # cleans up first
    try:
        assert not [ns for ns in netns_cluster._namespaces() if run in ns]
        assert not os.path.exists(os.path.join(netns_cluster.STATE_DIR, f"{run}.json"))
    finally:
        c.down()


def test_the_deployment_walkthrough(netns, tmp_path):
    """docs/deployment.md, command by command: etcd, three masters on it, two stores with the
    stores' token, a requester with the cluster token, `tierkv stat` over etcd."""
    import subprocess
    net = netns(["E", "M1", "M2", "M3", "S1", "S2", "R"])
    tokens = {}
    for name in ("cluster", "store"):
        path = tmp_path / f"{name}.token"
        path.write_text(subprocess.run(["openssl", "rand", "-hex", "32"], check=True,
                                       stdout=subprocess.PIPE, text=True).stdout)
        path.chmod(0o600)
        tokens[name] = str(path)
    _, ep = sv.start_etcd(net, "E")
    assert ep == "10.211.1.2:2379"
    for m in ("M1", "M2", "M3"):
        sv.start_master(net, m, ep, extra=["--token-file", tokens["cluster"],
                                           "--store-token-file", tokens["store"]])
    master = f"etcd://{ep}"
    for s in ("S1", "S2"):
        sv.start_store(net, s, master, extra=["--token-file", tokens["store"],
                                              "--accept-token-file", tokens["cluster"]])
    r = sv.Requester(net, "R", master, extra={"token_file": tokens["cluster"]})
    keys = [f"d{i}" for i in range(32)]
    assert r.call("put", keys=keys, version=1, size=SIZE, replica_num=2)["results"] == [0]
    assert r.call("get", keys=keys, versions=_versions(keys), size=SIZE)["results"] == \
        ["ok"] * len(keys)
    stat = net.exec("R", [sv.tierkv_binary(), "stat", "--master", master, "--token-file",
                          tokens["cluster"], "--json"])
    assert stat.returncode == 0, stat.stderr
    import json
    st = json.loads(stat.stdout)
    text = json.dumps(st)
    assert "10.211.5.2" in text and "10.211.6.2" in text  # both stores' segments
    # Without the token, the masters refuse (and say why).
    bad = net.exec("R", [sv.tierkv_binary(), "stat", "--master", master])
    assert bad.returncode != 0 and "UNAUTHENTICATED" in (bad.stdout + bad.stderr)
    r.close()
