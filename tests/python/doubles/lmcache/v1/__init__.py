# Test double of lmcache/v1/__init__.py (LMCache/LMCache, dev branch). NOT real LMCache.
