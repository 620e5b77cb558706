"""The engine's block allocator with its own prefix cache (LRU over unreferenced blocks).

A block holding a full, canonically computed chunk is registered under its chunk hash; a
later request with the same prefix takes it (a local hit) instead of recomputing or loading
it. Unreferenced cached blocks are evicted least recently used first when blocks run out, so
a working set larger than the engine's memory overflows to tierkv and comes back from there.
"""

from collections import OrderedDict


class BlockManager:
    def __init__(self, num_blocks):
        self.num_blocks = num_blocks
        self.free = list(range(num_blocks - 1, -1, -1))  # never used or uncached
        self.lru = OrderedDict()  # hash -> block, refcount 0, least recently used first
        self.cached = {}          # hash -> block (referenced or not)
        self.block_hash = {}      # block -> hash
        self.ref = [0] * num_blocks
        self.evictions = 0

    def num_available(self):
        return len(self.free) + len(self.lru)

    def match_prefix(self, hashes):
        """Blocks of the longest cached prefix of ``hashes``, referenced for the caller."""
        out = []
        for h in hashes:
            b = self.cached.get(h)
            if b is None:
                break
            out.append(b)
        for b in out:
            self._take(b)
        return out

    def _take(self, b):
        if self.ref[b] == 0:
            self.lru.pop(self.block_hash[b], None)
        self.ref[b] += 1

    def allocate(self, n):
        """n fresh blocks (evicting LRU cached ones), or None if fewer are available."""
        if n > self.num_available():
            return None
        out = []
        for _ in range(n):
            if self.free:
                b = self.free.pop()
            else:
                h, b = self.lru.popitem(last=False)
                del self.cached[h]
                del self.block_hash[b]
                self.evictions += 1
            self.ref[b] = 1
            out.append(b)
        return out

    def register(self, block, h):
        """Marks a referenced block as holding chunk ``h`` (if no other block does)."""
        if h in self.cached or block in self.block_hash:
            return
        self.cached[h] = block
        self.block_hash[block] = h

    def release(self, blocks):
        for b in blocks:
            self.ref[b] -= 1
            if self.ref[b] == 0:
                h = self.block_hash.get(b)
                if h is None:
                    self.free.append(b)
                else:
                    self.lru[h] = b  # most recently used at the end

    def drop_cache(self):
        """Forgets every unreferenced cached block (tests: force the next hit to tierkv)."""
        for h, b in list(self.lru.items()):
            del self.cached[h]
            del self.block_hash[b]
            self.free.append(b)
        self.lru.clear()
