# Test double of lmcache/logging.py (LMCache/LMCache, dev branch). NOT real LMCache.
import logging as _logging


def init_logger(name: str) -> _logging.Logger:
    """Return a std logger (the real one adds LMCache formatting)."""
    return _logging.getLogger(name)
