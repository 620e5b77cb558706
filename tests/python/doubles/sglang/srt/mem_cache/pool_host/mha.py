# TEST DOUBLE (tierkv tests), not SGLang. Path mirror of pool_host/mha.py@0047d999.
from sglang.srt.mem_cache.memory_pool_host import MHATokenToKVPoolHost  # noqa: F401
