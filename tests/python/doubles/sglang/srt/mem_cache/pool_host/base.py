# TEST DOUBLE (tierkv tests), not SGLang. Path mirror of pool_host/base.py@049f8e64.
from sglang.srt.mem_cache.memory_pool_host import HostKVCache, synchronized  # noqa: F401
