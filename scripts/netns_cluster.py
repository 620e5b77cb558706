"""A cluster of "hosts" on one machine: network namespaces behind a router namespace, each with
its own interface and address, for tests and benchmarks of tierkv across a real network path
(docs/testing.md, "Many hosts in network namespaces").

    10.211.<i>.2 (host i, eth0) --veth-- 10.211.<i>.1 (router, v<i>) ... router ... host j

A routed topology rather than a bridge: a cut between two hosts is then a policy rule in the
router (``ip rule add from A to B blackhole``) that drops their packets silently, one way or
both, with nothing but iproute2 (these kernels have no netem and no tc drop action). A host's
link is shaped with ``tc qdisc ... tbf`` on both of its ends. Nothing is added to the machine's
own namespace: every address lives inside namespaces this module creates and removes.

Needs root, ``ip`` (iproute2) and ``tc``. ``unavailable()`` says why a machine cannot run it;
``Cluster`` creates the namespaces, runs processes in them and tears everything down, even
after a failed test: every run records itself in /run/tierkv-netns/<run>.json before it
creates anything, and ``cleanup_stale()`` (called by every new run) removes the namespaces and
processes of runs whose process is gone.

CLI: ``python3 scripts/netns_cluster.py up --hosts 4`` (prints the hosts and addresses, keeps
them until ``down RUN``), ``down RUN``, ``cleanup`` (stale runs), ``check``.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

STATE_DIR = "/run/tierkv-netns"
PREFIX = "tkv"
SUBNET = "10.211"


class NetnsError(RuntimeError):
    pass


def _run(argv, check=True):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and p.returncode != 0:
        raise NetnsError(f"{' '.join(argv)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def unavailable():
    """Why namespaces cannot be used here (a sentence), or None."""
    if os.geteuid() != 0:
        return "network namespaces need root (run as root; CI does)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"no `{tool}` command (apt-get install -y iproute2)"
    probe = f"{PREFIX}probe{os.getpid()}"
    p = _run(["ip", "netns", "add", probe], check=False)
    if p.returncode != 0:
        return f"`ip netns add` failed: {p.stderr.strip()}"
    _run(["ip", "netns", "del", probe], check=False)
    return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_namespace(ns):
    """SIGKILL every process in namespace ``ns``, then delete it."""
    p = _run(["ip", "netns", "pids", ns], check=False)
    for pid in p.stdout.split():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    for _ in range(50):
        if _run(["ip", "netns", "del", ns], check=False).returncode == 0:
            return
        time.sleep(0.1)  # a process still exiting holds the namespace
    raise NetnsError(f"could not delete network namespace {ns}")


def _namespaces():
    p = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in p.stdout.splitlines() if line.strip()]


def remove_run(run):
    """Removes run ``run``'s namespaces (and the processes in them) and its state file."""
    for ns in _namespaces():
        if ns.startswith(f"{PREFIX}{run}-"):
            _kill_namespace(ns)
    path = os.path.join(STATE_DIR, f"{run}.json")
    if os.path.exists(path):
        os.unlink(path)


def cleanup_stale():
    """Removes what runs whose process is gone left behind (namespaces, their processes, state
    files); returns the run ids removed. Runs of live processes are left alone."""
    removed = []
    live_runs = set()
    if os.path.isdir(STATE_DIR):
        for f in sorted(os.listdir(STATE_DIR)):
            path = os.path.join(STATE_DIR, f)
            try:
                with open(path) as fh:
                    st = json.load(fh)
            except (OSError, ValueError):
                os.unlink(path)
                continue
            run = f[:-len(".json")]
            if st.get("kept") or _alive(int(st.get("pid", 0))):
                live_runs.add(run)
                continue
            remove_run(run)
            removed.append(run)
    # Namespaces of this module's naming whose run has no state file at all.
    for ns in _namespaces():
        if ns.startswith(PREFIX) and "-" in ns:
            run = ns[len(PREFIX):].split("-", 1)[0]
            if len(run) == 8 and run not in live_runs:
                _kill_namespace(ns)
                if run not in removed:
                    removed.append(run)
    return removed


class Proc:
    """A process running in a host's namespace (its own process group)."""

    def __init__(self, host, argv, popen, log_path):
        self.host = host
        self.argv = argv
        self.popen = popen
        self.log_path = log_path

    @property
    def pid(self):
        return self.popen.pid

    def signal(self, sig):
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, sig)
            except ProcessLookupError:
                pass

    def kill(self):
        self.signal(signal.SIGKILL)
        self.signal(signal.SIGCONT)
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            pass

    def stop(self, timeout=10):
        """SIGTERM, then SIGKILL after ``timeout`` seconds."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def alive(self):
        return self.popen.poll() is None

    def log(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def _die_with_parent():
    import ctypes
    os.setsid()
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Cluster:
    """``hosts``: names (letters, digits); host i gets 10.211.<i+1>.2."""

    can_cut = True

    def __init__(self, hosts, workdir=None):
        reason = unavailable()
        if reason:
            raise NetnsError(reason)
        if len(hosts) > 250 or len(set(hosts)) != len(hosts):
            raise NetnsError("at most 250 distinct host names")
        for h in hosts:
            if not h.isalnum():
                raise NetnsError(f"host name {h!r}: letters and digits only")
        cleanup_stale()
        self.run = uuid.uuid4().hex[:8]
        self.hosts = list(hosts)
        self.router = f"{PREFIX}{self.run}--router"  # no host name has a dash
        self.workdir = workdir or f"/tmp/tierkv-netns-{self.run}"
        os.makedirs(self.workdir, exist_ok=True)
        self.procs = []
        self._cuts = set()
        self._up = False
        os.makedirs(STATE_DIR, exist_ok=True)
        self._state = os.path.join(STATE_DIR, f"{self.run}.json")
        with open(self._state, "w") as f:  # before anything exists: a crash is cleanable
            json.dump({"pid": os.getpid(), "hosts": self.hosts, "workdir": self.workdir}, f)

    # ---- topology -------------------------------------------------------------------------

    def ns(self, host):
        return f"{PREFIX}{self.run}-{host}"

    def ip(self, host):
        return f"{SUBNET}.{self.hosts.index(host) + 1}.2"

    def _veth(self, host):
        return f"v{self.hosts.index(host) + 1}"

    def up(self):
        try:
            _run(["ip", "netns", "add", self.router])
            _run(["ip", "netns", "exec", self.router, "sysctl", "-qw", "net.ipv4.ip_forward=1"])
            _run(["ip", "-n", self.router, "link", "set", "lo", "up"])
            for i, h in enumerate(self.hosts, start=1):
                ns, veth = self.ns(h), self._veth(h)
                _run(["ip", "netns", "add", ns])
                _run(["ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name",
                      veth, "netns", self.router])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
                _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
                _run(["ip", "-n", self.router, "link", "set", veth, "up"])
                _run(["ip", "-n", ns, "addr", "add", f"{SUBNET}.{i}.2/24", "dev", "eth0"])
                _run(["ip", "-n", self.router, "addr", "add", f"{SUBNET}.{i}.1/24", "dev", veth])
                _run(["ip", "-n", ns, "route", "add", "default", "via", f"{SUBNET}.{i}.1"])
            self._up = True
        except Exception:
            self.down()
            raise
        return self

    def cut(self, a, b, both=True):
        """Packets from ``a`` to ``b`` (and back, ``both``) vanish silently in the router."""
        pairs = [(a, b), (b, a)] if both else [(a, b)]
        for x, y in pairs:
            if (x, y) not in self._cuts:
                _run(["ip", "-n", self.router, "rule", "add", "from", self.ip(x), "to",
                      self.ip(y), "blackhole"])
                self._cuts.add((x, y))

    def heal(self, a, b, both=True):
        pairs = [(a, b), (b, a)] if both else [(a, b)]
        for x, y in pairs:
            if (x, y) in self._cuts:
                _run(["ip", "-n", self.router, "rule", "del", "from", self.ip(x), "to",
                      self.ip(y), "blackhole"])
                self._cuts.discard((x, y))

    def isolate(self, host):
        """Cut ``host`` from every other host (both ways)."""
        for other in self.hosts:
            if other != host:
                self.cut(host, other)

    def heal_all(self):
        for x, y in list(self._cuts):
            self.heal(x, y, both=False)

    def shape(self, host, rate="1gbit", burst="256kb", latency="50ms"):
        """Limits ``host``'s link to ``rate`` both ways (tbf at each end); None removes it."""
        for ns, dev in ((self.ns(host), "eth0"), (self.router, self._veth(host))):
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                 check=False)
            if rate is not None:
                _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
                      "rate", rate, "burst", burst, "latency", latency])

    # ---- processes ------------------------------------------------------------------------

    def spawn(self, host, argv, name=None, env=None, stdout=None, stdin=None):
        """Starts ``argv`` in ``host``'s namespace; stderr (and stdout unless given) go to a
        log file in the work directory."""
        log_path = os.path.join(self.workdir, f"{name or os.path.basename(argv[0])}-{host}-"
                                              f"{len(self.procs)}.log")
        log = open(log_path, "w")
        full_env = dict(os.environ)
        full_env.update(env or {})
        popen = subprocess.Popen(["ip", "netns", "exec", self.ns(host)] + list(argv),
                                 stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                 stdout=stdout if stdout is not None else log, stderr=log,
                                 env=full_env, preexec_fn=_die_with_parent, text=True)
        log.close()
        p = Proc(host, argv, popen, log_path)
        self.procs.append(p)
        return p

    def exec(self, host, argv, timeout=60):
        return subprocess.run(["ip", "netns", "exec", self.ns(host)] + list(argv),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              timeout=timeout)

    def down(self):
        """Stops every process and removes every namespace of this run (idempotent)."""
        for p in self.procs:
            p.kill()
        remove_run(self.run)
        self._up = False

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()


class Loopback:
    """The same interface as Cluster with every "host" on 127.0.0.1 (no namespaces, no root):
    processes, but no cuts or shaping (``can_cut`` is False)."""

    can_cut = False

    def __init__(self, hosts, workdir=None):
        self.run = uuid.uuid4().hex[:8]
        self.hosts = list(hosts)
        self.workdir = workdir or f"/tmp/tierkv-loopback-{self.run}"
        os.makedirs(self.workdir, exist_ok=True)
        self.procs = []

    def ip(self, host):
        return "127.0.0.1"

    def up(self):
        return self

    def spawn(self, host, argv, name=None, env=None, stdout=None, stdin=None):
        log_path = os.path.join(self.workdir, f"{name or os.path.basename(argv[0])}-{host}-"
                                              f"{len(self.procs)}.log")
        full_env = dict(os.environ)
        full_env.update(env or {})
        with open(log_path, "w") as log:
            popen = subprocess.Popen(list(argv), stdout=stdout if stdout is not None else log,
                                     stdin=stdin if stdin is not None else subprocess.DEVNULL,
                                     stderr=log, env=full_env, preexec_fn=_die_with_parent,
                                     text=True)
        p = Proc(host, argv, popen, log_path)
        self.procs.append(p)
        return p

    def down(self):
        for p in self.procs:
            p.kill()

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()


def _main(argv):
    import argparse
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    u = sub.add_parser("up", help="create N hosts and keep them (until `down RUN`)")
    u.add_argument("--hosts", type=int, default=3)
    d = sub.add_parser("down", help="remove a run's namespaces and processes")
    d.add_argument("run")
    sub.add_parser("cleanup", help="remove what dead runs left behind")
    sub.add_parser("check", help="say whether this machine can run the harness")
    a = ap.parse_args(argv)
    if a.cmd == "check":
        reason = unavailable()
        print(reason or "ok")
        return 2 if reason else 0
    if a.cmd == "cleanup":
        print("removed runs:", " ".join(cleanup_stale()) or "none")
        return 0
    if a.cmd == "down":
        remove_run(a.run)
        return 0
    c = Cluster([f"h{i}" for i in range(a.hosts)])
    c.up()
    with open(c._state, "w") as f:  # owned by nobody now: `down` removes it
        json.dump({"pid": 0, "hosts": c.hosts, "workdir": c.workdir, "kept": True}, f)
    print(f"run {c.run}")
    for h in c.hosts:
        print(f"{h} {c.ns(h)} {c.ip(h)}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
