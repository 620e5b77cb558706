"""``batch_get_session_start_with_sources``: the layer-wise session start that SGLang's Mooncake
direct linker prefers when the store has it (it falls back to ``batch_get_session_start``
otherwise), written over the binding's calls.

Returns ``(codes, sources)``: per key the code of ``batch_get_session_start`` and the tier the
object was in when the session started — ``"memory"`` when it had a memory replica (looked up
just before the start), ``"local_disk"`` when only a disk replica, ``None`` for a key that
failed. SGLang uses the source for its prefetch metrics; the bytes a session serves are the
same whichever tier they came from."""


def batch_get_session_start_with_sources(self, keys):
    keys = list(keys)
    descs = self.batch_get_replica_desc(keys)
    codes = list(self.batch_get_session_start(keys))
    sources = []
    for key, code in zip(keys, codes):
        if code != 0:
            sources.append(None)
        elif any(d.is_memory_replica() for d in descs.get(key, [])):
            sources.append("memory")
        else:
            sources.append("local_disk")
    return codes, sources


def attach(cls):
    """Adds the call above to the binding's store class."""
    cls.batch_get_session_start_with_sources = batch_get_session_start_with_sources
