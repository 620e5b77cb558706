# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors the package layout of github.com/vllm-project/vllm (see README.md here for the
# file@commit each module follows). Only what a KV connector and tierkv's tests touch.
__version__ = "0.0.0+tierkv-double"
IS_TEST_DOUBLE = True
