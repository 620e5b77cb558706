"""Mooncake's dummy-client mode on tierkv: engine processes that own no segment attach to a
`tierkv store` on their host with setup_dummy(mem_pool_size, local_buffer_size, address), where
address is the store's metrics address (it serves /client_info), and take zero-copy buffers from
alloc_from_mem_pool. Also the batch and "with_parallelism" tensor calls Mooncake's dummy-client
test uses."""

import ctypes
import json
import re
import urllib.request

import pytest

import tierkv
from conftest import Child, tierkv_binary

MiB = 1 << 20


@pytest.fixture(scope="module")
def store_address():
    binary = tierkv_binary()
    master = Child([binary, "master", "--host", "127.0.0.1", "--port", "0", "--metrics-port",
                    "-1", "--default_kv_lease_ttl=300"], r"tierkv master listening on (\S+)")
    store = Child([binary, "store", "--master", master.match.group(1), "--segment-size", "64MiB",
                   "--metrics-port", "0"], r"tierkv store serving segment")
    # The metrics line follows the serving line (read directly: it may already be buffered).
    metrics = re.search(r"tierkv store metrics on (\S+)", store.proc.stdout.readline())
    assert metrics, "tierkv store printed no metrics address"
    yield metrics.group(1)
    store.kill()
    master.kill()


def dummy(address, pool=8 * MiB):
    s = tierkv.MooncakeDistributedStore()
    assert s.setup_dummy(pool, 4 * MiB, address) == 0, s.last_error()
    return s


def test_client_info_names_the_stores_master_and_segment(store_address):
    with urllib.request.urlopen(f"http://{store_address}/client_info", timeout=5) as r:
        info = json.loads(r.read())
    assert info["master"] and info["protocol"] == "tcp" and info["segment"]


def test_two_dummy_clients_share_the_stores_pool(store_address):
    a, b = dummy(store_address), dummy(store_address)
    try:
        assert a.put("dummy-k", b"hello dummy") == 0
        assert b.get("dummy-k") == b"hello dummy"
        assert b.put("dummy-k", b"again") == 0  # a re-put is done (Mooncake's convention)
        # The object lives in the store's segment: neither dummy contributes one.
        (desc,) = a.get_replica_desc("dummy-k")
        assert desc.segment_name.split("@")[0] not in ("", a.get_hostname())
        ptr = b.alloc_from_mem_pool(1 * MiB)
        assert ptr != 0 and ptr % 4096 == 0
        assert b.register_buffer(ptr, 1 * MiB) == 0
        assert b.get_into("dummy-k", ptr, 1 * MiB) == len(b"hello dummy")
        assert ctypes.string_at(ptr, 11) == b"hello dummy"
        # The store's segment was read over shared memory (a dummy is on the store's host).
        with urllib.request.urlopen(f"http://{store_address}/metrics", timeout=5) as r:
            shm = re.search(r"^tierkv_store_shm_connections (\S+)$", r.read().decode(), re.M)
        assert shm and float(shm.group(1)) >= 1, "no shared-memory connection to the store"
        ctypes.memmove(ptr, b"z" * 4096, 4096)
        assert b.put_from("dummy-zero-copy", ptr, 4096) == 0
        assert a.get("dummy-zero-copy") == b"z" * 4096
        assert b.unregister_buffer(ptr) == 0
    finally:
        a.close()
        b.close()


def test_the_pool_limit_is_kept(store_address):
    s = dummy(store_address, pool=2 * MiB)
    try:
        assert s.alloc_from_mem_pool(MiB) != 0
        assert s.alloc_from_mem_pool(MiB) != 0
        assert s.alloc_from_mem_pool(1) == 0
        assert "mem_pool_size" in s.last_error()
        assert s.alloc_from_mem_pool(0) == 0
    finally:
        s.close()


def test_setup_dummy_names_what_is_wrong(store_address):
    s = tierkv.MooncakeDistributedStore()
    rc = s.setup_dummy(MiB, MiB, "127.0.0.1:1")
    assert rc == int(tierkv.ErrorCode.RPC_FAIL)
    assert "no tierkv store answers at 127.0.0.1:1" in s.last_error()
    assert s.setup_dummy(MiB, MiB, "no-port") == int(tierkv.ErrorCode.INVALID_PARAMS)
    # An HTTP server that is not a store: no /client_info page, or one without a master.
    import http.server
    import threading

    class Page(http.server.BaseHTTPRequestHandler):
        body = None

        def do_GET(self):
            if Page.body is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.end_headers()
            self.wfile.write(Page.body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        address = f"127.0.0.1:{server.server_address[1]}"
        assert s.setup_dummy(MiB, MiB, address) == int(tierkv.ErrorCode.RPC_FAIL)
        assert "did not answer 200" in s.last_error()
        Page.body = b'{"protocol": "tcp"}'
        assert s.setup_dummy(MiB, MiB, address) == int(tierkv.ErrorCode.RPC_FAIL)
        assert "no master address" in s.last_error()
    finally:
        server.shutdown()


def test_batch_and_parallelism_tensor_calls(store_address):
    torch = pytest.importorskip("torch")
    s = dummy(store_address)
    try:
        t = torch.arange(64, dtype=torch.float32).reshape(4, 16)
        assert s.batch_put_tensor_with_tp(["tp-a", "tp-b"], [t, t + 1], tp_size=2,
                                          split_dim=1) == [0, 0]
        shards = s.batch_get_tensor_with_tp(["tp-a", "tp-b"], tp_rank=1, tp_size=2)
        assert torch.equal(shards[0], torch.chunk(t, 2, dim=1)[1].contiguous())
        assert torch.equal(shards[1], torch.chunk(t + 1, 2, dim=1)[1].contiguous())
        assert s.put_tensor_with_parallelism("par", t) == 0
        assert torch.equal(s.get_tensor("par"), t)
        assert s.upsert_tensor_with_parallelism("par", t * 2) == 0
        assert torch.equal(s.get_tensor("par"), t * 2)
        with pytest.raises(ValueError, match="TensorParallelism"):
            s.put_tensor_with_parallelism("par2", t, parallelism=object())
        size = s.get_size("par")
        ptr = s.alloc_from_mem_pool(size)
        assert s.register_buffer(ptr, size) == 0
        assert s.get_into("par", ptr, size) == size
        assert s.batch_put_tensor_with_parallelism_from(["par-from"], [ptr], [size]) == [0]
        assert torch.equal(s.get_tensor("par-from"), t * 2)
        assert s.batch_upsert_tensor_with_parallelism_from(["par"], [ptr], [size]) == [0]
        assert s.batch_put_tensor_from(["x1", "x2"], [ptr], [size]) == [
            int(tierkv.ErrorCode.INVALID_PARAMS)] * 2
        mismatch = s.batch_get_tensor_into(["par", "missing"], [ptr], [size])
        assert mismatch == [int(tierkv.ErrorCode.INVALID_PARAMS)] * 2
        assert s.unregister_buffer(ptr) == 0
    finally:
        s.close()
