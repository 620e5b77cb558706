"""The worker side of tierkv's vLLM connector: loads and saves of the step's blocks.

Loads: ``start_load_kv`` queues the step's loads on the loader thread, which goes through the
layers in forward order: each layer's objects are fetched into a staging slot (two slots,
alternating: one fills while the other's scatter runs) and scattered into the engine's
blocks; ``wait_for_layer_load`` waits for that layer only. Asynchronous (``load_async``)
requests load the same way outside the forward and are reported by ``get_finished``.

Saves: ``save_kv_layer`` queues the layer on the copier thread, which gathers the step's
completed blocks of that layer into a staging slot (after the engine's stream reached that
point, on a GPU); the putter thread puts them from there. ``wait_for_save`` waits for the
step's gathers, so the engine may reuse any block once it returns; a finished request's blocks
are released (``get_finished``'s ``done_sending``) once its puts ended. A request whose load
failed in a step computed that step from missing KV: its saves of the step are dropped.

Mamba layers have no per-layer hooks in vLLM's forward (only attention layers call
``wait_for_layer_load`` / ``save_kv_layer``): their states load first and ``start_load_kv``
waits for them; ``wait_for_save`` gathers them (the forward has written them by then).
"""

import logging
import queue
import threading
import time

from ._common import NO_AVAILABLE_HANDLE, OBJECT_NOT_FOUND, is_stored
from ._kv_blocks import Staging, _Streams, block_source, pin_wanted

_log = logging.getLogger("tierkv.integrations.vllm")



class _LoadJob:
    """One step's (or one asynchronous request's) loads; an event per layer."""

    def __init__(self, loads, layer_names):
        self.loads = loads
        self.layer_done = {n: threading.Event() for n in layer_names}
        self.cuda_done = {}
        self.failed_blocks = set()
        self.failed_requests = set()
        self.all_done = threading.Event()

    def finish(self):
        for ld in self.loads:
            if any(set(ids) & self.failed_blocks for _, ids, _ in ld.groups):
                self.failed_requests.add(ld.req_id)
        for ev in self.layer_done.values():
            ev.set()
        self.all_done.set()


class VllmWorker:
    """``keys``: the connector's key maker (``keys.layer_key(group, layer_index, hash)`` and
    ``keys.cross_key(group, hash)``); ``options``: the parsed extra config."""

    def __init__(self, store, keys, options, kv_role, stats):
        self.store = store
        self.keys = keys
        self.opt = options
        self.kv_role = kv_role
        self.stats = stats
        self.layers = []         # LayerTensor in forward order
        self.layer_group = {}    # layer name -> group index
        self.layer_index = {}    # layer name -> global layer index (key)
        self.group_layers = {}   # group -> [LayerTensor] in forward order
        self.single_tensor_names = set()  # layers held by one cross-layer tensor
        self.hookless = []       # layer names the forward never hooks (Mamba states)
        self.streams = None
        self.load_staging = self.save_staging = None
        self._meta = None
        self._job = None
        self._async = {}         # request id -> _LoadJob
        self._errors = set()
        self._lock = threading.Lock()
        self._cv = threading.Condition(self._lock)
        self._copy_pending = 0   # gathers queued and not ended (wait_for_save)
        self._put_pending = {}   # request id -> save batches not yet put
        self._finished = set()   # finished requests not yet reported done_sending
        self._paused = set()     # requests whose saves stopped (store full)
        self._bad_keys = set()   # present but unreadable: the next save replaces them
        self._events = []        # (group, [hash hex]) stored, for KV events
        self._cross = None       # group -> cross-layer batches of the step being gathered
        self._load_q, self._copy_q, self._put_q = queue.Queue(), queue.Queue(), queue.Queue()
        self._threads = []
        self._closed = False

    # ---- registration ---------------------------------------------------------------------

    def register(self, kv_caches, layer_groups, layer_indices, num_blocks, hookless=()):
        """``kv_caches``: {layer name: tensor, or a Mamba layer's list of state tensors};
        ``layer_groups``: layer name -> group; ``layer_indices``: layer name -> the global
        layer index used in keys; ``hookless``: the layers the forward never hooks."""
        if self.layers:
            raise RuntimeError("register_kv_caches called twice")
        hookless = set(hookless)
        for name, t in kv_caches.items():
            if name not in layer_groups:
                raise ValueError(f"KV cache layer {name!r} is in no KV-cache group")
            if isinstance(t, (list, tuple)) != (name in hookless):
                raise ValueError(f"layer {name!r}: a list of state tensors is expected exactly "
                                 "for the layers of a Mamba group")
            lt = block_source(name, t, num_blocks)
            if name in hookless:
                self.hookless.append(name)
            self.layers.append(lt)
            g = layer_groups[name]
            self.layer_group[name] = g
            self.layer_index[name] = layer_indices[name]
            self.group_layers.setdefault(g, []).append(lt)
        devices = {lt.tensor.device for lt in self.layers}
        if len(devices) != 1:
            raise ValueError(f"KV caches on several devices: {sorted(map(str, devices))}")
        self.streams = _Streams(next(iter(devices)))
        pin = pin_wanted(self.layers)
        obj = max(self._object_bytes(g) for g in self.group_layers)
        per_slot = self.opt.staging_buffer_size // 8
        if per_slot < obj:
            raise ValueError(f"staging_buffer_size {self.opt.staging_buffer_size} is too small: "
                             f"a slot (1/8 of it) must hold one object of {obj} bytes")
        # 2 load slots, 6 save slots of equal size.
        self.load_staging = Staging(self.store, per_slot * 2, 2, pin)
        self.save_staging = Staging(self.store, per_slot * 6, 6, pin)
        for target, name in ((self._load_loop, "tierkv-load"), (self._copy_loop, "tierkv-copy"),
                             (self._put_loop, "tierkv-put")):
            th = threading.Thread(target=target, name=name, daemon=True)
            th.start()
            self._threads.append(th)

    def _object_bytes(self, group):
        ls = self.group_layers[group]
        return sum(lt.block_bytes for lt in ls) if self.opt.cross_layers else ls[0].block_bytes

    # ---- per step -------------------------------------------------------------------------

    def bind(self, meta):
        self._meta = meta

    def clear(self):
        self._meta = None
        self._job = None

    def start_load(self):
        meta = self._meta
        if meta is None or not meta.loads or not self.layers:
            return
        names = [lt.name for lt in self.layers]
        after = self.streams.engine_event()
        sync = [ld for ld in meta.loads if not ld.is_async]
        for ld in meta.loads:
            if ld.is_async:
                job = _LoadJob([ld], names)
                self._async[ld.req_id] = job
                self._load_q.put((job, after))
        if sync:
            self._job = _LoadJob(sync, names)
            self._load_q.put((self._job, after))
            for name in self.hookless:  # loaded first; no layer hook will wait for them
                self.wait_layer(name)

    def wait_layer(self, layer_name):
        job = self._job
        if job is None:
            return
        ev = job.layer_done.get(layer_name)
        if ev is None:
            return
        ev.wait()
        self.streams.engine_wait(job.cuda_done.get(layer_name))

    def save_layer(self, layer_name, hook=True):
        if hook and layer_name in self.hookless:
            return  # gathered by wait_for_save (a hook here would be a second save)
        meta = self._meta
        if meta is None or not meta.saves or self.kv_role == "kv_consumer":
            return
        if layer_name not in self.layer_group:
            return
        with self._lock:
            self._copy_pending += 1
        self._copy_q.put((layer_name, meta.saves, self._job, self.streams.engine_event()))

    def wait_for_save(self):
        """Returns once every gather of the step's saves ended: the engine's blocks are free
        to be reused (the puts go on from staging). The step's end travels behind its gathers
        to the putter, which then counts the step's saves of each request as put."""
        meta = self._meta
        if meta is not None and meta.saves and self.kv_role != "kv_consumer":
            for name in self.hookless:
                self.save_layer(name, hook=False)
            with self._lock:
                for sv in meta.saves:
                    self._put_pending[sv.req_id] = self._put_pending.get(sv.req_id, 0) + 1
                self._copy_pending += 1
            self._copy_q.put(("end", meta.saves, self._job, None))
        with self._cv:
            while self._copy_pending:
                self._cv.wait()

    def handle_preemptions(self, preempted_req_ids):
        """Preempted requests' blocks are about to be reused: their gathers and any
        asynchronous load into them end first."""
        self.wait_for_save()
        for rid in preempted_req_ids or ():
            job = self._async.get(rid)
            if job is not None:
                job.all_done.wait()

    def get_finished(self, finished_req_ids):
        """(done_sending, done_recving). done_sending names only finished requests that had
        saves (those whose request_finished asked vLLM to keep the blocks: vLLM frees a
        request's blocks when it is named here, and a request it already freed must not be),
        once their puts ended; finished requests that never saved are forgotten."""
        with self._lock:
            for r in finished_req_ids or ():
                if r in self._put_pending:
                    self._finished.add(r)
                else:
                    self._paused.discard(r)
            sending = {r for r in self._finished if not self._put_pending.get(r)}
            for r in sending:
                self._finished.discard(r)
                self._put_pending.pop(r, None)
                self._paused.discard(r)
        recving = set()
        for rid, job in list(self._async.items()):
            if job.all_done.is_set():
                recving.add(rid)
                del self._async[rid]
        return (sending or None), (recving or None)

    def load_errors(self):
        with self._lock:
            out, self._errors = self._errors, set()
        return out

    def take_stored(self):
        with self._lock:
            out, self._events = self._events, []
        return out

    def flush(self, timeout=None):
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._copy_pending or any(self._put_pending.values()):
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def close(self):
        if self._closed:
            return
        self._closed = True
        if self._threads:
            self.flush()
            for q in (self._load_q, self._copy_q, self._put_q):
                q.put(None)
            for th in self._threads:
                th.join()
        for st in (self.load_staging, self.save_staging):
            if st is not None:
                st.close()

    # ---- loader ---------------------------------------------------------------------------

    def _load_loop(self):
        while True:
            item = self._load_q.get()
            if item is None:
                return
            job, after = item
            try:
                self._run_load(job, after)
            except Exception as e:  # never leave a waiter hanging, never claim bytes
                _log.error("tierkv load failed: %s", e)
                for ld in job.loads:
                    for _, ids, _ in ld.groups:
                        job.failed_blocks.update(ids)
            finally:
                with self._lock:
                    self._errors.update(job.failed_blocks)
                job.finish()

    def _load_targets(self, job, group):
        pairs = []
        for ld in job.loads:
            for g, ids, hashes in ld.groups:
                if g == group:
                    pairs.extend(zip(ids, hashes))
        return pairs

    def _run_load(self, job, after):
        t0 = time.perf_counter()
        slot_turn = 0
        slot_events = [None, None]
        if self.opt.cross_layers:
            for g, layers in self.group_layers.items():
                pairs = self._load_targets(job, g)
                ev = None
                if pairs:
                    keys = [self.keys.cross_key(g, h) for _, h in pairs]
                    ev = self._load_batches(job, pairs, keys, layers, slot_events, after)
                for lt in layers:
                    job.cuda_done[lt.name] = ev
                    job.layer_done[lt.name].set()
        else:
            first = [lt for lt in self.layers if lt.name in self.hookless]
            for lt in first + [lt for lt in self.layers if lt.name not in self.hookless]:
                g = self.layer_group[lt.name]
                pairs = [(b, h) for b, h in self._load_targets(job, g)
                         if b not in job.failed_blocks]
                ev = None
                if pairs:
                    li = self.layer_index[lt.name]
                    keys = [self.keys.layer_key(g, li, h) for _, h in pairs]
                    ev = self._load_batches(job, pairs, keys, [lt], slot_events, after,
                                            slot_turn)
                    slot_turn += 1
                job.cuda_done[lt.name] = ev
                job.layer_done[lt.name].set()
        n = sum(len(ids) for ld in job.loads for _, ids, _ in ld.groups)
        self.stats.add(load_seconds=time.perf_counter() - t0,
                       loaded_blocks=n - len(job.failed_blocks),
                       load_error_blocks=len(job.failed_blocks))

    def _load_batches(self, job, pairs, keys, layers, slot_events, after, turn=0):
        """Gets ``keys`` into staging in slot-sized batches (each key once per batch) and
        scatters them into ``layers``' blocks; returns the last scatter's event (GPU)."""
        obj = sum(lt.block_bytes for lt in layers)
        per_batch = max(1, min(self.load_staging.slot_bytes, self.opt.load_batch_bytes) // obj)
        todo = list(zip(pairs, keys))
        last = None
        while todo:
            seen, batch, rest = set(), [], []
            for item in todo:
                if item[1] in seen or len(batch) >= per_batch:
                    rest.append(item)
                else:
                    batch.append(item)
                    seen.add(item[1])
            slot = turn % 2
            turn += 1
            self.streams.host_wait(slot_events[slot])  # its previous scatter has ended
            base = self.load_staging.addr(slot)
            got = self.store.batch_get_into([k for _, k in batch],
                                            [base + i * obj for i in range(len(batch))],
                                            [obj] * len(batch))
            if self.opt.tier_log:
                self._log_tiers([k for _, k in batch])
            ok_rows, ok_blocks = [], []
            for i, (((b, _), k), g) in enumerate(zip(batch, got)):
                if g == obj:
                    ok_rows.append(i)
                    ok_blocks.append(b)
                else:
                    job.failed_blocks.add(b)
                    if g != OBJECT_NOT_FOUND:
                        self._bad_keys.add(k)
            if ok_rows:
                data = self.load_staging.view(slot, len(batch) * obj).view(len(batch), obj)
                rows = data if len(ok_rows) == len(batch) else data[ok_rows]

                def scatter(rows=rows, blocks=ok_blocks):
                    off = 0
                    for lt in layers:
                        lt.scatter(blocks, rows[:, off:off + lt.block_bytes])
                        off += lt.block_bytes

                last = slot_events[slot] = self.streams.run(after, scatter)
                self.stats.add(loaded_bytes=len(ok_rows) * obj)
            todo = rest
        return last

    def _log_tiers(self, keys):
        mem = disk = 0
        for descs in self.store.batch_get_replica_desc(keys).values():
            kinds = {str(d.tier) for d in descs}
            if any("MEMORY" in k for k in kinds):
                mem += 1
            elif descs:
                disk += 1
        _log.info("tierkv load batch: %d objects, %d from memory, %d from disk, %d missing",
                  len(keys), mem, disk, len(keys) - mem - disk)

    # ---- saves: gathers, then puts -------------------------------------------------------

    def _copy_loop(self):
        while True:
            item = self._copy_q.get()
            if item is None:
                return
            layer_name, saves, job, after = item
            try:
                if layer_name == "end":
                    batches = [b for bs in (self._cross or {}).values() for b in bs]
                    self._cross = None
                    self._put_q.put((batches, job, [sv.req_id for sv in saves]))
                else:
                    self._gather(layer_name, saves, job, after)
            except Exception as e:
                _log.error("tierkv save of %s failed: %s", layer_name, e)
                self.stats.add(save_errors=1)
            finally:
                with self._cv:
                    self._copy_pending -= 1
                    self._cv.notify_all()

    def _save_pairs(self, saves, group):
        out = []
        for sv in saves:
            if sv.req_id in self._paused:
                continue
            for g, ids, hashes in sv.groups:
                if g == group:
                    out.extend((b, h, sv.req_id) for b, h in zip(ids, hashes))
        return out

    def _gather(self, layer_name, saves, job, after):
        g = self.layer_group[layer_name]
        layers = self.group_layers[g]
        lt = next(x for x in layers if x.name == layer_name)
        if self.opt.cross_layers:
            pos = layers.index(lt)
            if self._cross is None:
                self._cross = {}
            if pos == 0 or g not in self._cross:
                self._cross[g] = self._start_batches(self._save_pairs(saves, g), layers,
                                                     lambda h: self.keys.cross_key(g, h), g,
                                                     emit=True)
            batches = self._cross[g]
            off = sum(x.block_bytes for x in layers[:pos])
            for b in batches:
                self._gather_into(b, lt, off, after)
            return  # put at the step's end, every layer in
        li = self.layer_index[layer_name]
        batches = self._start_batches(self._save_pairs(saves, g), [lt],
                                      lambda h: self.keys.layer_key(g, li, h), g,
                                      emit=lt is layers[-1])
        for b in batches:
            self._gather_into(b, lt, 0, after)
        self._put_q.put((batches, job, None))

    def _start_batches(self, triples, layers, key_of, group, emit):
        """Save batches of one staging slot each; ``emit``: their stored blocks make KV
        events (the group's last layer, or cross-layer objects)."""
        obj = sum(lt.block_bytes for lt in layers)
        per = max(1, self.save_staging.slot_bytes // obj)
        seen, uniq = set(), []
        for b, h, r in triples:  # each chunk once (requests sharing a prefix)
            if h not in seen:
                seen.add(h)
                uniq.append((b, h, r))
        out = []
        for i in range(0, len(uniq), per):
            part = uniq[i:i + per]
            out.append({"slot": self.save_staging.acquire(), "obj": obj, "rows": part,
                        "keys": [key_of(h) for _, h, _ in part], "event": None,
                        "group": group, "emit": emit})
        return out

    def _gather_into(self, batch, lt, off, after):
        slot, obj, rows = batch["slot"], batch["obj"], batch["rows"]
        dst = self.save_staging.view(slot, len(rows) * obj).view(len(rows), obj)
        blocks = [b for b, _, _ in rows]

        def copy():
            dst[:, off:off + lt.block_bytes].copy_(lt.gather(blocks), non_blocking=True)

        batch["event"] = self.streams.run(after, copy)
        self.streams.host_wait(batch["event"])

    def _put_loop(self):
        while True:
            item = self._put_q.get()
            if item is None:
                return
            batches, job, done_reqs = item
            try:
                if job is not None:
                    job.all_done.wait()
                for b in batches:
                    self._put_batch(b, job)
            except Exception as e:
                _log.error("tierkv put failed: %s", e)
                self.stats.add(save_errors=1)
            finally:
                for b in batches:
                    self.save_staging.release(b["slot"])
                if done_reqs is not None:
                    with self._cv:
                        for r in done_reqs:
                            self._put_pending[r] = self._put_pending.get(r, 1) - 1
                        self._cv.notify_all()

    def _put_batch(self, b, job):
        obj, rows, keys = b["obj"], b["rows"], b["keys"]
        base = self.save_staging.addr(b["slot"])
        idx = [i for i, (_, _, r) in enumerate(rows)
               if (job is None or r not in job.failed_requests) and r not in self._paused]
        self.stats.add(save_skipped_objects=len(rows) - len(idx))
        codes = {}
        for upsert in (False, True):
            part = [i for i in idx if (keys[i] in self._bad_keys) == upsert]
            if not part:
                continue
            cfg = self.keys.replicate_config([rows[i][1] for i in part])
            call = self.store.batch_upsert_from if upsert else self.store.batch_put_from
            got = call([keys[i] for i in part], [base + i * obj for i in part],
                       [obj] * len(part), cfg)
            for i, rc in zip(part, got):
                codes[i] = rc
                if upsert and rc == 0:
                    self._bad_keys.discard(keys[i])
        saved, errors, stored = 0, 0, []
        for i, rc in codes.items():
            if is_stored(rc):
                saved += 1
                stored.append(rows[i][1])
            elif rc == NO_AVAILABLE_HANDLE:
                r = rows[i][2]
                if r not in self._paused:
                    self._paused.add(r)
                    self.stats.add(save_paused_requests=1)
                self.stats.add(save_skipped_objects=1)
            else:
                errors += 1
        if errors:
            _log.warning("tierkv: %d block saves failed", errors)
        self.stats.add(saved_objects=saved, save_errors=errors, saved_bytes=saved * obj)
        if stored and b["emit"]:
            with self._lock:
                self._events.append((b["group"], stored))
