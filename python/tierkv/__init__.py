"""tierkv: a tiered, distributed KV-cache store (docs/python.md).

``tierkv.DistributedStore`` (also ``MooncakeDistributedStore``) follows the method names,
argument order, defaults and return conventions of Mooncake's
``mooncake.store.MooncakeDistributedStore``; ``tierkv.connector`` holds the engine
connector's logic (chunk hashes, keys, group ids, lookup), written in C++.
"""

import enum as _enum

from . import _tierkv
from ._tierkv import (
    BufferHandle,
    DistributedStore,
    Descriptor,
    DiskDescriptor,
    MemoryDescriptor,
    ReplicaDescriptor,
    ReplicaStatus,
    ReplicaTier,
    ReplicateConfig,
    SoftPinAction,
    strerror,
)

__version__ = _tierkv.__version__

#: Mooncake's name for the same class: engines switch by changing an import.
MooncakeDistributedStore = DistributedStore
#: Mooncake's name of a replica's kind (ReplicaDescriptor.type): MEMORY or DISK.
ReplicaType = ReplicaTier

#: Every public error code (docs/errors.md), as returned per key by the store's calls.
ErrorCode = _enum.IntEnum("ErrorCode", dict(_tierkv._error_codes()), module=__name__)

from . import _mooncake_session, _mooncake_tensor  # noqa: E402

_mooncake_tensor.attach(DistributedStore, ErrorCode.INVALID_PARAMS)
_mooncake_session.attach(DistributedStore)

from . import connector  # noqa: E402  (after the names connector users may import from here)

__all__ = [
    "BufferHandle",
    "DistributedStore",
    "ErrorCode",
    "MooncakeDistributedStore",
    "Descriptor",
    "DiskDescriptor",
    "MemoryDescriptor",
    "ReplicaDescriptor",
    "ReplicaType",
    "ReplicaStatus",
    "ReplicaTier",
    "ReplicateConfig",
    "SoftPinAction",
    "connector",
    "strerror",
    "__version__",
]
