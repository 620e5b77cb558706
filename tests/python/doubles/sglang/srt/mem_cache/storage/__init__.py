# TEST DOUBLE (tierkv tests), not SGLang. Mirrors python/sglang/srt/mem_cache/storage/__init__.py
# (sgl-project/sglang): the real package re-exports StorageBackendFactory, which is what
# HiCacheController imports (`from sglang.srt.mem_cache.storage import StorageBackendFactory`).
from sglang.srt.mem_cache.storage.backend_factory import StorageBackendFactory

__all__ = ["StorageBackendFactory"]
