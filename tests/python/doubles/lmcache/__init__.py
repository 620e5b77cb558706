# Test double of LMCache's top-level package `lmcache/__init__.py`
# (LMCache/LMCache, dev branch as indexed 2025-2026; see README.md here).
# NOT the real LMCache. Only what a storage backend and tierkv's tests need.
"""Fake minimal ``lmcache`` package used by tierkv tests.

Real LMCache exposes ``torch_dev`` (the torch device module, e.g. torch.cuda)
and ``torch_device_type`` (e.g. "cuda"); backends use them for dst_device.
"""
import torch

torch_dev = torch.cuda
torch_device_type = "cuda" if torch.cuda.is_available() else "cpu"

IS_TEST_DOUBLE = True
__version__ = "0.0.0+tierkv-test-double"
