"""The engine connector's logic, shared by every engine integration (docs/python.md).

Everything here is C++ (include/tierkv/connector.h) bound by tierkv._tierkv: chunk hashes
(SHA-256 or xxh3-128, the same in every process), keys in vLLM's MooncakeStoreConnector schema,
group ids, put filtering, the longest-prefix lookup across rank namespaces, the SSD tier's
staging split, and strict parsing of the connector's extra config.
KVConnector (kv_connector.py) is the vLLM-shaped connector built on them (docs/engine.md).
"""

from ._tierkv.connector import (
    AttentionKind,
    ExtraConfig,
    KeyMetadata,
    LookupResult,
    PutBatch,
    StagingPlan,
    StreamedObject,
    chunk_hashes,
    chunk_key,
    filter_missing,
    group_id,
    key_prefix,
    key_tp_rank,
    longest_prefix_hit,
    lookup_namespaces,
    model_name,
    parse_extra_config,
    plan_staged_load,
    staging_need,
    tp_replication_factor,
)
from .kv_connector import (  # the vLLM-shaped connector (docs/engine.md)
    ConnectorConfig,
    KVConnector,
    KVConnectorMetadata,
    KVConnectorRole,
    KVRole,
    LoadSpec,
    SaveSpec,
    TierkvConnectorMetadata,
    parse_config,
)

__all__ = [
    "AttentionKind",
    "ConnectorConfig",
    "KVConnector",
    "KVConnectorMetadata",
    "KVConnectorRole",
    "KVRole",
    "LoadSpec",
    "SaveSpec",
    "TierkvConnectorMetadata",
    "parse_config",
    "ExtraConfig",
    "KeyMetadata",
    "LookupResult",
    "PutBatch",
    "StagingPlan",
    "StreamedObject",
    "chunk_hashes",
    "chunk_key",
    "filter_missing",
    "group_id",
    "key_prefix",
    "key_tp_rank",
    "longest_prefix_hit",
    "lookup_namespaces",
    "model_name",
    "parse_extra_config",
    "plan_staged_load",
    "staging_need",
    "tp_replication_factor",
]
