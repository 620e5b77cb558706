"""A Mooncake-style engine process for tests/python/test_mooncake_deploy.py.

It sets up a ``tierkv.MooncakeDistributedStore`` as an engine does in Mooncake's usual
deployment (a segment of its own, a remote master), then answers one JSON command per line on
stdin with one JSON line on stdout:

- ``{"op": "put", "keys": [...], "size": n}``: puts each key (bytes derived from the key) with
  ``batch_put_from`` through a registered buffer: ``{"codes": [...]}``;
- ``{"op": "get", "keys": [...], "size": n}``: reads each key with ``batch_get_into`` and checks
  every byte: ``{"results": [...], "wrong": [keys whose bytes differ]}``;
- ``{"op": "hostname"}``: ``{"hostname": store.get_hostname()}``;
- ``{"op": "exit"}``: closes the store and exits.

Usage: mooncake_worker.py HOSTNAME PROTOCOL MASTER SEGMENT_BYTES
"""

import hashlib
import json
import sys

import numpy as np

import tierkv


def content(key, size):
    seed = hashlib.sha256(key.encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def main():
    hostname, protocol, master, segment = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    store = tierkv.MooncakeDistributedStore()
    rc = store.setup(hostname, "P2PHANDSHAKE", segment, 16 << 20, protocol, "", master)
    print(json.dumps({"ready": rc, "error": store.last_error() if rc else ""}), flush=True)
    if rc != 0:
        return 1
    buf = np.zeros(64 << 20, dtype=np.uint8)
    assert store.register_buffer(buf.ctypes.data, buf.nbytes) == 0
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "exit":
            break
        if op == "hostname":
            reply = {"hostname": store.get_hostname()}
        elif op == "put":
            size, keys = cmd["size"], cmd["keys"]
            ptrs = []
            for i, k in enumerate(keys):
                buf[i * size:(i + 1) * size] = np.frombuffer(content(k, size), dtype=np.uint8)
                ptrs.append(buf.ctypes.data + i * size)
            reply = {"codes": list(store.batch_put_from(keys, ptrs, [size] * len(keys)))}
        elif op == "get":
            size, keys = cmd["size"], cmd["keys"]
            buf[:len(keys) * size] = 0xEE
            ptrs = [buf.ctypes.data + i * size for i in range(len(keys))]
            results = list(store.batch_get_into(keys, ptrs, [size] * len(keys)))
            wrong = [k for i, k in enumerate(keys) if results[i] == size and
                     bytes(buf[i * size:(i + 1) * size]) != content(k, size)]
            reply = {"results": results, "wrong": wrong}
        else:
            reply = {"error": f"unknown op {op}"}
        print(json.dumps(reply), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
