"""KV events of tierkv's vLLM connector: BlockStored from the workers (once every worker
stored a block), and BlockRemoved from the scheduler, which sweeps the blocks it announced and
reports those the store no longer holds whole (evicted, removed, lost with a store).

Why a sweep: the store evicts on its own (DRAM pressure, a disk tier full, a store gone), and
an engine's router needs to hear of it; checking the announced blocks' keys with
``batch_is_exist`` on a background thread, a bounded number of keys per interval, costs the
scheduler nothing per step and works the same with an embedded store and a remote master. A
block counts as removed when any of its keys (every layer, group namespace and rank) is gone:
a lookup could no longer hit it. Blocks over the tracking bound are reported removed when
dropped from tracking (a router then under-estimates the cache: safe), never silently kept.
"""

import logging
import threading
from collections import OrderedDict

_log = logging.getLogger("tierkv.integrations.vllm")

MEDIUM = "tierkv"


def _event_fields(cls):
    for name in ("__struct_fields__", "__dataclass_fields__"):
        f = getattr(cls, name, None)
        if f is not None:
            return set(f)
    return set()


def _vllm_events(kind, blocks, fields):
    """One event of vLLM's class ``kind`` (BlockStored, BlockRemoved) per (group, [hash hex])
    of ``blocks``, with ``fields`` and those the installed version declares (lora_name,
    group_idx); without vLLM, dicts."""
    try:
        from vllm.distributed import kv_events as module
        cls = getattr(module, kind)
    except (ImportError, AttributeError):
        cls = None
    out = []
    for group, hashes in blocks:
        hs = [bytes.fromhex(h) for h in hashes]
        if cls is None:
            out.append({"type": kind, "block_hashes": hs, "medium": MEDIUM, "group_idx": group})
            continue
        declared = _event_fields(cls)
        kw = dict(fields, block_hashes=hs, medium=MEDIUM)
        for name, value in (("lora_name", None), ("group_idx", group)):
            if name in declared:
                kw[name] = value
        out.append(cls(**kw))
    return out


def kv_events(stored, block_size):
    """The workers' KV events of the blocks stored: vLLM's KVConnectorKVEvents holding
    BlockStored events when vLLM is importable, else a plain holder of dicts."""
    return TierkvKVEvents.of(_vllm_events("BlockStored", stored, dict(
        parent_block_hash=None, token_ids=[], block_size=block_size, lora_id=None)))


try:
    from vllm.distributed.kv_events import KVConnectorKVEvents as _EventsBase
    from vllm.distributed.kv_events import KVEventAggregator as _Aggregator
except ImportError:
    _EventsBase, _Aggregator = object, None


class TierkvKVEvents(_EventsBase):
    """vLLM's KVConnectorKVEvents over its KVEventAggregator: the events every worker
    reported (one worker each when created; merged across workers by vLLM)."""

    def __init__(self, num_workers=1):
        self._agg = _Aggregator(num_workers) if _Aggregator is not None else None
        self._plain = []

    @classmethod
    def of(cls, events):
        out = cls(1)
        out.add_events(events)
        return out

    def add_events(self, events):
        if self._agg is not None:
            self._agg.add_events(events)
        else:
            self._plain.extend(events)

    def aggregate(self):
        if self._agg is not None:
            common = self._agg.get_common_events()
            self._agg.clear_events()
            self._agg.add_events(common)
            self._agg.reset_workers()
        return self

    def increment_workers(self, count=1):
        if self._agg is not None:
            self._agg.increment_workers(count)

    def get_all_events(self):
        return self._agg.get_all_events() if self._agg is not None else list(self._plain)

    def get_number_of_workers(self):
        return self._agg.get_number_of_workers() if self._agg is not None else 1

    def clear_events(self):
        if self._agg is not None:
            self._agg.clear_events()
            self._agg.reset_workers()
        self._plain = []

    def merge(self, other):
        self.add_events(other.get_all_events())
        self.increment_workers(other.get_number_of_workers())
        return self


class RemovedBlocks:
    """The blocks this scheduler announced as stored, swept for removal.

    ``keys_of(group, hash_hex)`` names every key a hit on that block needs. ``stored`` is
    called with the blocks of each BlockStored event the scheduler yields; ``take`` returns
    the removed blocks as ``[(group, [hash hex, ...]), ...]``."""

    def __init__(self, store, keys_of, interval_s, keys_per_sweep, max_blocks):
        self._store = store
        self._keys_of = keys_of
        self._interval = interval_s
        self._budget = keys_per_sweep
        self._max = max_blocks
        self._tracked = OrderedDict()  # (group, hash hex) -> None, oldest first
        self._removed = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tierkv-removed", daemon=True)
        self._thread.start()

    def stored(self, group, hashes):
        with self._lock:
            for h in hashes:
                self._tracked[(group, h)] = None
                self._tracked.move_to_end((group, h))
            while len(self._tracked) > self._max:
                self._removed.append(self._tracked.popitem(last=False)[0])

    def take(self):
        with self._lock:
            out, self._removed = self._removed, []
        by_group = {}
        for g, h in out:
            by_group.setdefault(g, []).append(h)
        return sorted(by_group.items())

    def sweep(self):
        """Checks the oldest-checked blocks, up to the key budget; returns how many were
        found removed."""
        with self._lock:
            batch, keys, spans = [], [], []
            for block in self._tracked:
                ks = self._keys_of(*block)
                if batch and len(keys) + len(ks) > self._budget:
                    break
                batch.append(block)
                spans.append((len(keys), len(ks)))
                keys.extend(ks)
            for block in batch:  # checked now: to the back of the queue
                self._tracked.move_to_end(block)
        if not batch:
            return 0
        try:
            exists = self._store.batch_is_exist(keys)
        except Exception as e:  # the store unreachable: nothing is known, nothing reported
            _log.warning("tierkv: the sweep for removed blocks failed: %s", e)
            return 0
        gone = [b for b, (i, n) in zip(batch, spans) if any(x == 0 for x in exists[i:i + n])]
        with self._lock:
            for block in gone:
                if block in self._tracked:
                    del self._tracked[block]
                    self._removed.append(block)
        return len(gone)

    def close(self):
        self._stop.set()
        self._thread.join()

    def _loop(self):
        while not self._stop.wait(self._interval):
            try:
                self.sweep()
            except Exception as e:  # never kill the thread: the next sweep retries
                _log.warning("tierkv: the sweep for removed blocks failed: %s", e)


def removed_events(removed):
    """BlockRemoved events (vLLM's class when importable, else dicts) of ``take``'s result."""
    return _vllm_events("BlockRemoved", removed, {})
