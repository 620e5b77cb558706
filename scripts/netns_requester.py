"""A tierkv requester driven over stdin/stdout (JSON lines), run inside a netns "host" by
tests and benchmarks (scripts/netns_services.py ``Requester``).

Every object's bytes derive from its key and version (``content``), so any read can be checked:
a get answers ``ok`` (the bytes of a version this key was put with), ``wrong`` (anything else:
must never happen), or the store's error code. Commands, one JSON object per line:

    {"op": "setup", "config": {...}}               DistributedStore.setup(dict)
    {"op": "put", "keys": [...], "version": V, "size": N, "replica_num": R}
    {"op": "get", "keys": [...], "versions": {key: [V, ...]}, "size": N}
    {"op": "exist", "keys": [...]}
    {"op": "remove", "keys": [...]}
    {"op": "where", "keys": [...]}                 segments holding each key's replicas
    {"op": "quit"}

Each answers one line: {"op": ..., "results": [...], "seconds": ...} (or {"error": ...}).
"""

import hashlib
import json
import sys
import time


def content(key, version, size):
    """The bytes of ``key`` at ``version``: a SHA-256 stream of both, ``size`` bytes."""
    seed = hashlib.sha256(f"{key}\0{version}".encode()).digest()
    out = bytearray()
    block = seed
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block * 64  # 2 KiB per hash: cheap, and still unique per key and version
    return bytes(out[:size])


def _verdict(data, key, versions, size):
    if isinstance(data, int):
        return data
    if data is None or len(data) == 0:
        return "empty"
    for v in versions:
        if data == content(key, v, size):
            return "ok"
    return "wrong"


def main():
    import numpy as np
    import tierkv
    store = tierkv.DistributedStore()
    buf = None  # registered destination of gets (grown on demand)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        t0 = time.monotonic()
        try:
            if op == "setup":
                out = {"results": [store.setup(cmd["config"])], "error_text": store.last_error()}
            elif op == "put":
                cfg = tierkv.ReplicateConfig()
                cfg.replica_num = int(cmd.get("replica_num", 1))
                vals = [content(k, cmd["version"], cmd["size"]) for k in cmd["keys"]]
                out = {"results": [store.put_batch(cmd["keys"], vals, cfg)]}
            elif op == "get":
                size = int(cmd["size"])
                if buf is None or buf.size < size:
                    if buf is not None:
                        store.unregister_buffer(buf.ctypes.data)
                    buf = np.zeros(size, dtype=np.uint8)
                    store.register_buffer(buf.ctypes.data, buf.size)
                res = []
                for k in cmd["keys"]:
                    n = store.get_into(k, buf.ctypes.data, size)
                    data = n if n < 0 else buf[:n].tobytes()
                    res.append(_verdict(data, k, cmd["versions"][k], size))
                out = {"results": res}
            elif op == "exist":
                out = {"results": list(store.batch_is_exist(cmd["keys"]))}
            elif op == "remove":
                out = {"results": [store.remove(k, force=True) for k in cmd["keys"]]}
            elif op == "where":
                descs = store.batch_get_replica_desc(cmd["keys"])
                out = {"results": [sorted(str(getattr(d, "segment_name", "")) for d in
                                          descs.get(k, [])) for k in cmd["keys"]]}
            elif op == "quit":
                store.close()
                print(json.dumps({"op": op, "results": [0]}), flush=True)
                return 0
            else:
                out = {"error": f"unknown op {op!r}"}
        except Exception as e:  # reported, never fatal: the driver decides
            out = {"error": f"{type(e).__name__}: {e}"}
        out["op"] = op
        out["seconds"] = round(time.monotonic() - t0, 4)
        print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
