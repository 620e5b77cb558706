# TEST DOUBLE (tierkv tests), not SGLang. Newer SGLang moved the host pools into the package
# python/sglang/srt/mem_cache/pool_host/ (base.py, mha.py, mla.py; __init__ re-exports
# HostKVCache). This double re-exports the classes defined in ../memory_pool_host.py so
# both import paths resolve to the same classes. See ../../../README.md.
from sglang.srt.mem_cache.memory_pool_host import (  # noqa: F401
    HostKVCache,
    MHATokenToKVPoolHost,
    MLATokenToKVPoolHost,
)
from sglang.srt.mem_cache.pool_host.group import HostPoolGroup, PoolEntry  # noqa: F401,E402
