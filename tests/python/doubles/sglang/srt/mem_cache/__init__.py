# TEST DOUBLE (tierkv tests), not SGLang. Mirrors the package python/sglang/srt/mem_cache
# of sgl-project/sglang (see ../../README.md for commits).
