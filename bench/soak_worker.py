"""One requester of `tierkv bench soak` (bench/soak_bench.py): a mixed load on its own keys,
every byte read checked, one JSON line per second of what happened.

Each object's bytes derive from its key and version (scripts/netns_requester.py ``content``),
and the worker knows which versions a key may hold (a failed put or upsert may or may not have
landed), so every read is checked: bytes of a possible version are "ok", anything else is
"wrong"; a hit on a key removed for sure is "resurrected". Operations (weights in ``MIX``):
batched puts (a share with an eviction group, a share with replica_num 2), gets of keys put
(hits, or misses of evicted objects) and of keys never put (misses), removes, and upserts to a
new version.

Output lines: {"t": monotonic seconds, "ops": {"op/result": count}, "lat": {"op": [ms, ...]},
"wrong": [...], "resurrected": [...]}; errors carry their codes ("put/-800"). Times are
CLOCK_MONOTONIC, shared by every process of the machine (network namespaces do not change it),
so the driver lines them up with its chaos log.
"""

import argparse
import json
import os
import random
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "scripts"))
from netns_requester import content  # noqa: E402

MIX = (("put", 30), ("get_hit", 35), ("get_miss", 10), ("remove", 10), ("upsert", 15))
SIZES = (16 << 10, 64 << 10, 256 << 10)
BATCH = 8


class Worker:
    def __init__(self, store, name, rng, keyspace):
        import tierkv
        self.tierkv = tierkv
        self.store = store
        self.name = name
        self.rng = rng
        self.keyspace = keyspace
        self.keys = {}      # key -> (size, {possible versions}) of keys that may exist
        self.groups = {}    # key -> its eviction group (upserts must name it)
        self.removed = set()  # removed for sure (a hit is a resurrection)
        self.next = 0
        self.buf = np.zeros(max(SIZES) * BATCH, dtype=np.uint8)   # gets land here
        self.src = np.zeros(max(SIZES) * BATCH, dtype=np.uint8)   # puts leave from here
        for b in (self.buf, self.src):
            store.register_buffer(b.ctypes.data, b.size)
        self.reset()

    def reset(self):
        self.ops, self.lat, self.wrong, self.resurrected = {}, {}, [], []

    def count(self, op, result, n=1):
        k = f"{op}/{result}"
        self.ops[k] = self.ops.get(k, 0) + n

    def _config(self, group):
        cfg = self.tierkv.ReplicateConfig()
        cfg.replica_num = 2 if self.rng.random() < 0.25 else 1
        if group:
            cfg.group_ids = [group] * BATCH
        return cfg

    def put(self):
        if len(self.keys) >= self.keyspace:
            return self.remove()
        size = self.rng.choice(SIZES)
        keys = [f"{self.name}-{self.next + i}" for i in range(BATCH)]
        self.next += BATCH
        group = f"{self.name}-g{self.next}" if self.rng.random() < 0.3 else None
        for i, k in enumerate(keys):
            self.src[i * size:(i + 1) * size] = np.frombuffer(content(k, 1, size), np.uint8)
        base = self.src.ctypes.data
        rcs = self.store.batch_put_from(keys, [base + i * size for i in range(BATCH)],
                                        [size] * BATCH, self._config(group))
        for k, rc in zip(keys, rcs):
            # A failed put may still have landed (the master's end of it was lost): either.
            self.keys[k] = (size, {1} if rc == 0 else {1, None})
            if group:
                self.groups[k] = group
            self.removed.discard(k)
            self.count("put", "ok" if rc == 0 else rc)

    def upsert(self):
        if not self.keys:
            return self.put()
        k = self.rng.choice(list(self.keys))
        size, vs = self.keys[k]
        v = max([x for x in vs if x is not None] + [1]) + 1
        cfg = self.tierkv.ReplicateConfig()
        if k in self.groups:
            cfg.group_ids = [self.groups[k]]
        rc = self.store.upsert(k, content(k, v, size), cfg)
        self.keys[k] = (size, {v} if rc == 0 else vs | {v, None})
        # An upsert racing the eviction of its key: gone either way (or the new version).
        self.count("upsert", "ok" if rc == 0 else "not_found" if rc == -704 else rc)

    def remove(self):
        if not self.keys:
            return self.put()
        k = self.rng.choice(list(self.keys))
        rc = self.store.remove(k, force=True)
        if rc == 0:
            del self.keys[k]
            self.groups.pop(k, None)
            self.removed.add(k)
            self.count("remove", "ok")
        elif rc == -704:  # evicted meanwhile: gone either way
            del self.keys[k]
            self.count("remove", "not_found")
        else:
            self.count("remove", rc)

    def get_hit(self):
        if not self.keys:
            return self.put()
        keys = self.rng.sample(list(self.keys), min(BATCH, len(self.keys)))
        self._get(keys, "get_hit")

    def get_miss(self):
        pool = list(self.removed) if self.removed and self.rng.random() < 0.5 else []
        keys = self.rng.sample(pool, min(2, len(pool))) + \
            [f"{self.name}-never-{self.rng.randrange(1 << 30)}" for _ in range(BATCH - 2)]
        self._get(keys, "get_miss")

    def _get(self, keys, op):
        size = max(SIZES)
        base = self.buf.ctypes.data
        got = self.store.batch_get_into(keys, [base + i * size for i in range(len(keys))],
                                        [size] * len(keys))
        for i, (k, n) in enumerate(zip(keys, got)):
            if n < 0:
                if n == -704 and k in self.keys and op == "get_hit":
                    del self.keys[k]  # evicted (or lost with a store): a miss from now on
                self.count(op, "miss" if n == -704 else n)
                continue
            data = self.buf[i * size:i * size + n].tobytes()
            if k in self.removed or k not in self.keys:
                self.resurrected.append(k)
                self.count(op, "resurrected")
                continue
            ksize, vs = self.keys[k]
            if n == ksize and any(v is not None and data == content(k, v, ksize) for v in vs):
                self.count(op, "ok")
            else:
                known = sorted(v for v in vs if v is not None)
                seen = [v for v in range(1, max(known + [1]) + 2)
                        if n == ksize and data == content(k, v, ksize)]
                self.wrong.append({"key": k, "bytes": n, "size": ksize, "versions": known,
                                   "is_version": seen, "group": self.groups.get(k),
                                   "t": time.monotonic()})
                self.count(op, "wrong")

    def step(self):
        op = self.rng.choices([m for m, _ in MIX], [w for _, w in MIX])[0]
        t0 = time.monotonic()
        getattr(self, op)()
        self.lat.setdefault(op, []).append(round((time.monotonic() - t0) * 1000, 3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--name", required=True)
    ap.add_argument("--config", required=True, help="DistributedStore.setup dict, JSON")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--duration", type=float, required=True, help="seconds")
    ap.add_argument("--keyspace", type=int, default=2000, help="keys held at most")
    a = ap.parse_args()
    import tierkv
    store = tierkv.DistributedStore()
    deadline = time.monotonic() + 60
    while True:  # the masters may still be electing a leader
        rc = store.setup(json.loads(a.config))
        if rc == 0:
            break
        if time.monotonic() > deadline:
            print(json.dumps({"fatal": f"setup failed: {rc} {store.last_error()}"}), flush=True)
            return 1
        store = tierkv.DistributedStore()
        time.sleep(0.5)
    w = Worker(store, a.name, random.Random(a.seed), a.keyspace)
    end = time.monotonic() + a.duration
    last = time.monotonic()
    while time.monotonic() < end:
        w.step()
        now = time.monotonic()
        if now - last >= 1.0:
            print(json.dumps({"t": now, "ops": w.ops, "lat": w.lat, "wrong": w.wrong,
                              "resurrected": w.resurrected}), flush=True)
            w.reset()
            last = now
    print(json.dumps({"t": time.monotonic(), "ops": w.ops, "lat": w.lat, "wrong": w.wrong,
                      "resurrected": w.resurrected, "done": True}), flush=True)
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
