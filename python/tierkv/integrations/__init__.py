"""tierkv inside inference engines, loaded by the engine's own configuration
(docs/engine.md):

- ``tierkv.integrations.vllm.TierkvConnector``: vLLM's V1 KV connector;
- ``tierkv.integrations.sglang.TierkvHiCacheStorage``: SGLang's HiCache storage backend;
- ``tierkv.integrations.lmcache``: an LMCache storage backend.

Each imports its engine's classes only when the engine is installed; nothing else in tierkv
needs them.
"""
