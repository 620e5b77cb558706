"""Fixtures of the Python tests (run by scripts/test.sh through ctest, with Debian's python3).

``store`` is a DistributedStore in one of three modes, each test running in all of them:

- ``embedded``: an in-process master and this process's segment;
- ``standalone``: a pure requester (global_segment_size 0) of a ``tierkv master`` and a
  ``tierkv store`` that the session starts on 127.0.0.1 (``--port 0``: the master picks a free
  port and prints it);
- ``embedded_remote``: embedded mode with that remote master (this process contributes a
  segment to the shared pool too).

The processes are started once per session and killed at its end (and by the kernel if
pytest dies first: PR_SET_PDEATHSIG).
"""

import ctypes
import os
import re
import signal
import subprocess
import sys
import uuid

import pytest

import tierkv

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# The engines' test doubles (vllm, sglang, lmcache; written from their public source, see
# doubles/*/README.md): importable first, so tierkv.integrations subclasses their classes as it
# would the real engines'.
sys.path.insert(0, os.path.join(HERE, "doubles"))


def tierkv_binary():
    path = os.environ.get("TIERKV_BIN") or os.path.join(REPO, "build", "tierkv")
    if not os.access(path, os.X_OK):
        pytest.fail(f"the tierkv executable is not at {path} (set TIERKV_BIN)")
    return path


def _die_with_parent():
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Child:
    """A tierkv subprocess; waits for the line `ready` (a regex) on its stdout."""

    def __init__(self, args, ready, timeout=20.0):
        self.proc = subprocess.Popen(
            args,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            preexec_fn=_die_with_parent,
        )
        self.match = None
        import selectors
        import time

        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        while self.match is None:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.kill()
                raise RuntimeError(f"{args[1]} did not start: {' '.join(args)}")
            if sel.select(left):
                line = self.proc.stdout.readline()
                self.match = re.search(ready, line)
        sel.close()

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


@pytest.fixture(scope="session")
def cluster():
    binary = tierkv_binary()
    master = Child(
        [binary, "master", "--host", "127.0.0.1", "--port", "0", "--metrics-port", "-1"],
        r"tierkv master listening on (\S+)",
    )
    address = master.match.group(1)
    store = Child(
        [binary, "store", "--master", address, "--segment-size", "256MiB", "--small-pages",
         "--metrics-port", "-1"],
        r"tierkv store serving segment (\S+)",
    )
    yield {"address": address, "segment": store.match.group(1), "binary": binary}
    store.kill()
    master.kill()


MODES = ["embedded", "standalone", "embedded_remote"]

SEGMENT = 48 << 20
LOCAL_BUFFER = 16 << 20


def make_store(mode, cluster=None, segment=SEGMENT, local_buffer=LOCAL_BUFFER):
    s = tierkv.DistributedStore()
    if mode == "embedded":
        rc = s.setup("localhost", "P2PHANDSHAKE", segment, local_buffer, "tcp", "", "")
    elif mode == "standalone":
        rc = s.setup("localhost", "P2PHANDSHAKE", 0, local_buffer, "auto", "", cluster["address"])
    else:
        rc = s.setup("localhost", "P2PHANDSHAKE", segment, local_buffer, "auto", "",
                     cluster["address"])
    assert rc == 0, f"setup({mode}) failed: {rc} {s.last_error()}"
    return s


@pytest.fixture(params=MODES)
def mode(request):
    return request.param


@pytest.fixture
def store(mode, request):
    c = request.getfixturevalue("cluster") if mode != "embedded" else None
    s = make_store(mode, c)
    yield s
    s.remove_all(force=True)  # the cluster is shared by the session's tests
    assert s.close() == 0


@pytest.fixture
def embedded():
    s = make_store("embedded")
    yield s
    s.close()


@pytest.fixture
def key():
    """A function giving keys unique to this test run (the cluster outlives a test)."""
    prefix = uuid.uuid4().hex[:8]
    return lambda name="k": f"t{prefix}-{name}"
