# TEST DOUBLE (tierkv tests), not SGLang. Same module paths and names as real SGLang
# (github.com/sgl-project/sglang, python/sglang/...); see README.md here for the file@commit
# each module mirrors. Only what a HiCache storage backend and tierkv's tests touch.
__version__ = "0.0.0+tierkv-double"
IS_TEST_DOUBLE = True
