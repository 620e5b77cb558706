"""tierkv's processes on a netns cluster (scripts/netns_cluster.py): etcd, masters (a leader
and standbys on etcd), stores and requesters, each on a host of its own address."""

import json
import os
import re
import selectors
import shutil
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
PYTHON = "/usr/bin/python3"  # Debian's, with numpy and the tierkv module's ABI
ETCD_PORT, MASTER_PORT = 2379, 50051


def tierkv_binary():
    path = os.environ.get("TIERKV_BIN") or os.path.join(REPO, "build", "tierkv")
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"the tierkv executable is not at {path} (set TIERKV_BIN)")
    return path


def python_dir():
    return os.environ.get("TIERKV_PYTHONPATH") or os.path.join(REPO, "build", "python")


def wait_line(proc, pattern, timeout=20.0):
    """The first match of ``pattern`` in ``proc``'s log; raises if it exits or times out."""
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern)
    while True:
        m = rx.search(proc.log())
        if m:
            return m
        if not proc.alive():
            raise RuntimeError(f"{' '.join(proc.argv)} exited ({proc.popen.returncode}) on "
                               f"{proc.host}:\n{proc.log()[-2000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{' '.join(proc.argv)} on {proc.host}: no /{pattern}/ in "
                               f"{timeout} s:\n{proc.log()[-2000:]}")
        time.sleep(0.05)


def free_port():
    """A free TCP port of 127.0.0.1 (for processes sharing the machine's loopback)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_etcd(net, host, port=ETCD_PORT, peer_port=ETCD_PORT + 1):
    """A one-member etcd on ``host``; returns (proc, "IP:PORT")."""
    binary = shutil.which("etcd") or "/usr/bin/etcd"
    ip = net.ip(host)
    data = os.path.join(net.workdir, f"etcd-{host}")
    shutil.rmtree(data, ignore_errors=True)
    client, peer = f"http://{ip}:{port}", f"http://127.0.0.1:{peer_port}"
    proc = net.spawn(host, [binary, "--name", "e", "--data-dir", data,
                            "--listen-client-urls", client, "--advertise-client-urls", client,
                            "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                            "--initial-cluster", f"e={peer}", "--initial-cluster-state", "new"],
                     name="etcd")
    wait_line(proc, r"ready to serve client requests|serving client requests on|"
                    r"serving insecure client requests", timeout=30)
    return proc, f"{ip}:{port}"


def start_master(net, host, etcd=None, lease_ttl_s=2, client_ttl_ms=3000, extra=(),
                 port=MASTER_PORT):
    """A ``tierkv master`` on ``host`` (with ``etcd``: a candidate leader); returns the proc
    once it listens, on net.ip(host):port."""
    ip = net.ip(host)
    argv = [tierkv_binary(), "master", "--host", ip, "--port", str(port),
            "--metrics-port", "-1", "--client-ttl-ms", str(client_ttl_ms)]
    if etcd:
        argv += ["--ha", f"etcd://{etcd}", "--ha-lease-ttl-s", str(lease_ttl_s),
                 "--advertise", f"{ip}:{port}"]
    proc = net.spawn(host, argv + list(extra), name="master")
    wait_line(proc, r"tierkv master listening on")
    return proc


def start_store(net, host, master, segment="64MiB", extra=()):
    """A ``tierkv store`` on ``host`` serving its segment on its own address; ``master``:
    "IP:PORT" or "etcd://IP:PORT". Returns (proc, segment name)."""
    ip = net.ip(host)
    proc = net.spawn(host, [tierkv_binary(), "store", "--master", master, "--hostname", ip,
                            "--data-host", ip, "--segment-size", segment, "--small-pages",
                            "--metrics-port", "-1"] + list(extra), name="store")
    m = wait_line(proc, r"tierkv store serving segment (\S+)")
    return proc, m.group(1)


class Requester:
    """A requester process on a host (scripts/netns_requester.py), called synchronously."""

    def __init__(self, net, host, master, segment=0, local_buffer="16MB", extra=None):
        env = {"PYTHONPATH": python_dir()}
        self.proc = net.spawn(host, [PYTHON, os.path.join(HERE, "netns_requester.py")],
                              name="requester", env=env, stdout=subprocess.PIPE,
                              stdin=subprocess.PIPE)
        self.host = host
        conf = {"local_hostname": net.ip(host), "metadata_server": "P2PHANDSHAKE",
                "global_segment_size": segment, "local_buffer_size": local_buffer,
                "protocol": "tcp", "master_server_address": master}
        conf.update(extra or {})
        rc = self.call("setup", config=conf)
        if rc["results"] != [0]:
            raise RuntimeError(f"requester on {host}: setup {rc}")

    def call(self, op, timeout=120, **kw):
        p = self.proc.popen
        p.stdin.write(json.dumps(dict(kw, op=op)) + "\n")
        p.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        ready = sel.select(timeout)
        sel.close()
        if not ready:
            raise TimeoutError(f"requester on {self.host}: no answer to {op} in {timeout} s")
        line = p.stdout.readline()
        if not line:
            raise RuntimeError(f"requester on {self.host} died:\n{self.proc.log()[-2000:]}")
        out = json.loads(line)
        if "error" in out:
            raise RuntimeError(f"requester on {self.host}: {op}: {out['error']}")
        return out

    def close(self):
        if self.proc.alive():
            try:
                self.call("quit", timeout=20)
            except Exception:
                pass
        self.proc.stop()
