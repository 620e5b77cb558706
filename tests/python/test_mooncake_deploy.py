"""Mooncake's usual deployment on tierkv: every engine process contributes a segment to a remote
master (``global_segment_size > 0``, ``master_server_addr`` set), ``protocol`` "tcp" (Mooncake's
default) or "auto", ``local_hostname`` with or without ``:port``. Every process puts objects the
master may place on any other's segment, and reads every other's: no TRANSFER_FAIL, no wrong
byte. Then one process is killed and the others go on.

Each engine is a subprocess running mooncake_worker.py (one JSON command per line).
"""

import json
import os
import socket
import subprocess
import time
import sys
import uuid

import pytest

from conftest import Child, _die_with_parent, tierkv_binary

HERE = os.path.dirname(os.path.abspath(__file__))
SIZE = 64 << 10
PER_WORKER = 24


class Worker:
    def __init__(self, hostname, protocol, master, segment=16 << 20):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "mooncake_worker.py"), hostname, protocol, master,
             str(segment)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            preexec_fn=_die_with_parent, env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
        ready = json.loads(self.proc.stdout.readline() or '{"ready": "no output"}')
        assert ready["ready"] == 0, f"worker setup failed: {ready}"

    def call(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"worker died answering {cmd['op']}"
        return json.loads(line)

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write('{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.proc.kill()
        self.proc.wait()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def master():
    child = Child([tierkv_binary(), "master", "--host", "127.0.0.1", "--port", "0",
                   "--metrics-port", "-1", "--client-ttl-ms", "3000"],
                  r"tierkv master listening on (\S+)")
    yield child.match.group(1)
    child.kill()


@pytest.fixture(scope="module")
def master_short_lease():
    child = Child([tierkv_binary(), "master", "--host", "127.0.0.1", "--port", "0",
                   "--metrics-port", "-1", "--default_kv_lease_ttl=400"],
                  r"tierkv master listening on (\S+)")
    yield child.match.group(1)
    child.kill()


def hostnames(kind):
    if kind == "plain":
        return ["127.0.0.1"] * 3
    if kind == "localhost":
        return ["localhost"] * 3
    return [f"localhost:{free_port()}" for _ in range(3)]  # Mooncake's "host:port"


@pytest.mark.parametrize("protocol", ["tcp", "auto"])
@pytest.mark.parametrize("kind", ["plain", "localhost", "with_port"])
def test_every_engine_reads_every_other(master, protocol, kind):
    run = uuid.uuid4().hex[:8]
    workers = [Worker(h, protocol, master) for h in hostnames(kind)]
    try:
        keys = [[f"{run}-w{w}-{i}" for i in range(PER_WORKER)] for w in range(len(workers))]
        for w, worker in enumerate(workers):
            codes = worker.call(op="put", keys=keys[w], size=SIZE)["codes"]
            assert codes == [0] * PER_WORKER, f"worker {w} puts: {codes}"
        everything = [k for ks in keys for k in ks]
        for w, worker in enumerate(workers):
            got = worker.call(op="get", keys=everything, size=SIZE)
            assert got["wrong"] == []
            assert got["results"] == [SIZE] * len(everything), f"worker {w} gets: {got['results']}"
        # Each engine's get_hostname() names its own segment (what preferred_segment takes).
        names = {worker.call(op="hostname")["hostname"] for worker in workers}
        assert len(names) == len(workers)
    finally:
        for worker in workers:
            worker.close()


def test_a_killed_engine_does_not_stop_the_others(master):
    run = uuid.uuid4().hex[:8]
    workers = [Worker("127.0.0.1", "tcp", master) for _ in range(3)]
    try:
        first = [[f"{run}-a{w}-{i}" for i in range(PER_WORKER)] for w in range(3)]
        for w in range(3):
            assert workers[w].call(op="put", keys=first[w], size=SIZE)["codes"] == [0] * PER_WORKER
        workers[2].proc.kill()
        workers[2].proc.wait()
        # Right after the kill (the master has not expired it yet), puts go around the dead
        # segment and every get returns the right bytes or fails cleanly (its replicas died).
        for w in range(2):
            more = [f"{run}-b{w}-{i}" for i in range(PER_WORKER)]
            assert workers[w].call(op="put", keys=more, size=SIZE)["codes"] == [0] * PER_WORKER
            got = workers[w].call(op="get", keys=more, size=SIZE)
            assert got["wrong"] == [] and got["results"] == [SIZE] * PER_WORKER
            old = [k for ks in first for k in ks]
            got = workers[w].call(op="get", keys=old, size=SIZE)
            assert got["wrong"] == []
            assert all(r == SIZE or r < 0 for r in got["results"])
            # The survivors' own segments still hold what they were given.
            assert sum(r == SIZE for r in got["results"]) >= 1
    finally:
        for worker in workers:
            worker.close()


def test_preferred_segment_get_hostname_places_locally(master):
    import tierkv

    stores = []
    try:
        for _ in range(2):
            s = tierkv.MooncakeDistributedStore()
            assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                           master) == 0, s.last_error()
            stores.append(s)
        names = [s.get_hostname() for s in stores]
        assert names[0] != names[1]
        run = uuid.uuid4().hex[:8]
        for w, s in enumerate(stores):
            cfg = tierkv.ReplicateConfig()
            cfg.preferred_segment = s.get_hostname()  # LMCache's prefer_local_alloc
            keys = [f"{run}-p{w}-{i}" for i in range(10)]
            assert s.put_batch(keys, [b"x" * 4096] * 10, cfg) == 0
            for k in keys:
                descs = s.get_replica_desc(k)
                assert len(descs) == 1
                assert descs[0].segment_name.split("@")[0] == names[w]
    finally:
        for s in stores:
            s.remove_all(True)
            s.close()


def test_batch_replica_clear_drops_one_segments_replica_over_the_rpc(master_short_lease):
    import tierkv

    stores = []
    try:
        for _ in range(2):
            s = tierkv.MooncakeDistributedStore()
            assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                           master_short_lease) == 0, s.last_error()
            stores.append(s)
        key = "clear-" + uuid.uuid4().hex[:8]
        cfg = tierkv.ReplicateConfig()
        cfg.replica_num = 2
        assert stores[0].put(key, b"r" * 5000, cfg) == 0
        assert len(stores[0].get_replica_desc(key)) == 2
        assert stores[0].batch_replica_clear([key], stores[0].get_hostname()) == []  # fresh
        time.sleep(0.6)
        assert stores[0].batch_replica_clear([key], stores[0].get_hostname()) == [key]
        (left,) = stores[1].get_replica_desc(key)
        assert left.segment_name.split("@")[0] == stores[1].get_hostname()
        assert stores[1].get(key) == b"r" * 5000
        time.sleep(0.6)
        assert stores[1].batch_replica_clear([key], stores[1].get_hostname()) == [key]
        assert stores[0].is_exist(key) == 0  # the last replica took the object with it
    finally:
        for s in stores:
            s.close()


def test_tenants_see_only_their_own_objects(master):
    import tierkv

    def store(tenant):
        s = tierkv.MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", master,
                       tenant_id=tenant) == 0, s.last_error()
        return s

    bad = tierkv.MooncakeDistributedStore()
    assert bad.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 << 20, "tcp", "", master,
                     tenant_id="no/slash") == int(tierkv.ErrorCode.INVALID_CONFIG)
    assert "tenant_id" in bad.last_error()
    run = uuid.uuid4().hex[:8]
    stores = {t: store(t) for t in ("default", "alpha", "beta")}
    try:
        for t, s in stores.items():
            assert s.put(f"{run}-shared", t.encode()) == 0
            assert s.put(f"{run}-only-{t}", b"x") == 0
            assert s.put_batch([f"{run}-b1", f"{run}-b2"], [t.encode()] * 2) == 0
        for t, s in stores.items():
            assert s.get(f"{run}-shared") == t.encode()
            assert s.get_batch([f"{run}-b1", f"{run}-b2"]) == [t.encode()] * 2
            others = [o for o in stores if o != t]
            assert s.batch_is_exist([f"{run}-only-{o}" for o in others]) == [0, 0]
            assert s.get(f"{run}-only-{others[0]}") == b""
            assert s.remove(f"{run}-only-{others[0]}") == int(tierkv.ErrorCode.OBJECT_NOT_FOUND)
        # remove_by_regex and remove_all (forced: the gets above hold leases) stay inside the
        # caller's tenant ("^" anchors the key as the tenant names it).
        assert stores["default"].remove_by_regex(f"^{run}-shared$", True) == 1
        assert stores["alpha"].is_exist(f"{run}-shared") == 1
        assert stores["alpha"].remove_all(True) == 4
        assert stores["alpha"].batch_is_exist([f"{run}-shared", f"{run}-b1"]) == [0, 0]
        assert stores["beta"].batch_is_exist([f"{run}-shared", f"{run}-b1", f"{run}-only-beta"]) \
            == [1, 1, 1]
        assert stores["default"].is_exist(f"{run}-only-default") == 1
    finally:
        for s in stores.values():
            s.remove_all(True)
            s.close()


def test_tierkv_master_takes_a_mooncake_deployments_flags():
    binary = tierkv_binary()
    child = Child([binary, "master", "--rpc_address=127.0.0.1", "--port=0",
                   "--default_kv_lease_ttl=5000", "--default_kv_soft_pin_ttl=1800000",
                   "--eviction_high_watermark_ratio=0.95", "--eviction_ratio", "0.1",
                   "--enable_metric_reporting=false", "--client_ttl=10"],
                  r"tierkv master listening on (\S+)")
    try:
        worker = Worker("127.0.0.1", "tcp", child.match.group(1))
        try:
            assert worker.call(op="put", keys=["mc-flags"], size=SIZE)["codes"] == [0]
            assert worker.call(op="get", keys=["mc-flags"], size=SIZE)["results"] == [SIZE]
        finally:
            worker.close()
    finally:
        child.kill()
    # The translated values are the ones the master runs with (its start-up line, on stderr).
    proc = subprocess.Popen([binary, "master", "--rpc_address=127.0.0.1", "--port=0",
                             "--default_kv_lease_ttl=5000", "--eviction_high_watermark_ratio=0.95",
                             "--eviction_ratio=0.1", "--client_ttl=7", "--metrics_port=-1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_die_with_parent)
    try:
        line = ""
        while "lease TTL" not in line:
            line = proc.stderr.readline()
            assert line, "the master ended before its start-up line"
        assert "lease TTL 5000 ms, high watermark 0.95, eviction ratio 0.1" in line, line
        assert "client TTL 7000 ms" in line and "metrics: off" in line, line
    finally:
        proc.kill()
        proc.wait()
    out = subprocess.run([binary, "master", "--port=0", "--bogus-flag"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode != 0 and "bogus" in out.stderr  # tierkv's own flags still checked
    refused = {
        "--enable_offload=true": "enable_offload",
        "--cluster_id=c1": "--ha",
        "--enable_ha=true": "ha_backend_connstring",
        "--ha_backend_type=redis": "etcd",
        "--client_ttl=ten": "whole number",
    }
    for flag, named in refused.items():
        out = subprocess.run([binary, "master", "--port=0", flag], capture_output=True,
                             text=True, timeout=30)
        assert out.returncode == 2, (flag, out.stderr)
        assert flag.split("=")[0] in out.stderr and named in out.stderr, (flag, out.stderr)


def test_root_fs_dir_and_promotion_from_the_masters_flags(tmp_path, monkeypatch):
    import tierkv

    monkeypatch.delenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH", raising=False)
    binary = tierkv_binary()
    child = Child([binary, "master", "--rpc_address=127.0.0.1", "--port=0", "--metrics_port=-1",
                   f"--root_fs_dir={tmp_path}", "--promotion_on_hit=true",
                   "--promotion_admission_threshold=1"], r"tierkv master listening on (\S+)")
    try:
        s = tierkv.MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                       child.match.group(1), enable_ssd_offload=True) == 0, s.last_error()
        tiers = [p.name for p in tmp_path.iterdir()]
        assert len(tiers) == 1 and tiers[0].startswith(f"tierkv-{os.getpid()}-"), tiers
        assert s.put("rfs", b"r" * 4096) == 0 and s.get("rfs") == b"r" * 4096
        s.close()
    finally:
        child.kill()
    # Without --root_fs_dir the setup names what is missing.
    child = Child([binary, "master", "--host", "127.0.0.1", "--port", "0", "--metrics-port",
                   "-1"], r"tierkv master listening on (\S+)")
    try:
        s = tierkv.MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
                       child.match.group(1), enable_ssd_offload=True) == int(
                           tierkv.ErrorCode.INVALID_CONFIG)
        assert "--root-fs-dir" in s.last_error()
    finally:
        child.kill()


def test_get_all_segments_lists_every_contributed_segment():
    import re
    import urllib.request

    proc = subprocess.Popen([tierkv_binary(), "master", "--host", "127.0.0.1", "--port", "0",
                             "--metrics-port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, preexec_fn=_die_with_parent)
    try:
        master = re.search(r"listening on (\S+)", proc.stdout.readline()).group(1)
        http = re.search(r"metrics on (\S+)", proc.stdout.readline()).group(1)
        url = f"http://{http}/get_all_segments"
        assert urllib.request.urlopen(url, timeout=10).read() == b""
        workers = [Worker("127.0.0.1", "tcp", master) for _ in range(2)]
        try:
            names = sorted(w.call(op="hostname")["hostname"] for w in workers)
            with urllib.request.urlopen(url, timeout=10) as answer:
                assert answer.headers["Content-Type"].startswith("text/plain")
                assert sorted(answer.read().decode().splitlines()) == names
        finally:
            for w in workers:
                w.close()
    finally:
        proc.kill()
        proc.wait()


def test_setup_presents_the_cluster_token(tmp_path):
    """A master started with --token-file lets in a store set up with token_file= (or the dict
    key, or TIERKV_CLUSTER_TOKEN_FILE) and refuses one without it, with UNAUTHENTICATED."""
    import tierkv

    token = tmp_path / "token"
    token.write_text("python-setup-token-0123456789\n")
    token.chmod(0o600)
    child = Child([tierkv_binary(), "master", "--host", "127.0.0.1", "--port", "0",
                   "--metrics-port", "-1", "--token-file", str(token)],
                  r"tierkv master listening on (\S+)")
    try:
        address = child.match.group(1)
        store = tierkv.MooncakeDistributedStore()
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", address,
                           token_file=str(token)) == 0, store.last_error()
        assert store.put("with-token", b"member") == 0
        assert store.get("with-token") == b"member"
        store.close()

        refused = tierkv.MooncakeDistributedStore()
        code = refused.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", address)
        assert code == int(tierkv.ErrorCode.UNAUTHENTICATED), refused.last_error()
        assert "cluster token" in refused.last_error()

        by_dict = tierkv.MooncakeDistributedStore()
        assert by_dict.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                              "global_segment_size": 16 << 20, "local_buffer_size": 16 << 20,
                              "protocol": "tcp", "master_server_address": address,
                              "cluster_token_file": str(token)}) == 0, by_dict.last_error()
        by_dict.close()

        token.chmod(0o644)
        public = tierkv.MooncakeDistributedStore()
        assert public.setup("127.0.0.1", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "", address,
                            token_file=str(token)) == int(tierkv.ErrorCode.INVALID_CONFIG)
        assert "0644" in public.last_error()
        assert "python-setup-token" not in public.last_error()
    finally:
        child.kill()
