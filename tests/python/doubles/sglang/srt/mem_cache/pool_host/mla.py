# TEST DOUBLE (tierkv tests), not SGLang. Path mirror of pool_host/mla.py@01c0ede3.
from sglang.srt.mem_cache.memory_pool_host import MLATokenToKVPoolHost  # noqa: F401
