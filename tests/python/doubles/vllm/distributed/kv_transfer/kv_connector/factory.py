# TEST DOUBLE (tierkv tests), not vLLM. Pure stdlib; same module path and names as real vLLM.
# Mirrors vllm/distributed/kv_transfer/kv_connector/factory.py
# @ a4cd9d0d28bdb41db8dfe0acdafac2bf2f608630 (vllm-project/vllm): a registry of lazy
# loaders; otherwise importlib.import_module(kv_connector_module_path) + getattr(module,
# kv_connector); NO issubclass check; a class whose __init__ lacks a `kv_cache_config`
# parameter is built with the old 2-argument form; HMA check against scheduler_config.
# The registry holds only MultiConnector (registered at the end, as vLLM's factory registers
# its built-in connectors; tests register what else they need).
import importlib
import inspect
import logging
from collections.abc import Callable
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1 import KVConnectorRole, supports_hma

logger = logging.getLogger("vllm.distributed.kv_transfer.kv_connector.factory")


def supports_kw(callable_: Callable[..., Any], kw_name: str) -> bool:
    """Like vllm.utils.func_utils.supports_kw: a named or **kwargs parameter accepts it."""
    try:
        params = inspect.signature(callable_).parameters
    except (TypeError, ValueError):
        return False
    if kw_name in params:
        return params[kw_name].kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        inspect.Parameter.KEYWORD_ONLY)
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params.values())


class KVConnectorFactory:
    _registry: dict[str, Callable[[], type]] = {}

    @classmethod
    def register_connector(cls, name: str, module_path: str, class_name: str) -> None:
        if name in cls._registry:
            raise ValueError(f"Connector '{name}' is already registered.")

        def loader() -> type:
            return getattr(importlib.import_module(module_path), class_name)

        cls._registry[name] = loader

    @classmethod
    def create_connector(cls, config: Any, role: KVConnectorRole,
                         kv_cache_config: Any | None = None):
        kv_transfer_config = config.kv_transfer_config
        if kv_transfer_config is None:
            raise ValueError("kv_transfer_config must be set to create a connector")
        connector_cls, compat_sig = cls._get_connector_class_with_compat(kv_transfer_config)

        # Real: hma_enabled = not config.scheduler_config.disable_hybrid_kv_cache_manager.
        # Double: a config without scheduler_config counts as HMA disabled.
        sched = getattr(config, "scheduler_config", None)
        hma_enabled = sched is not None and not sched.disable_hybrid_kv_cache_manager
        if hma_enabled and not supports_hma(connector_cls):
            raise ValueError(f"Connector {connector_cls.__name__} does not support HMA but "
                             "HMA is enabled. Please set `--disable-hybrid-kv-cache-manager`.")
        logger.info("Creating v1 connector with name: %s and engine_id: %s",
                    connector_cls.__name__, getattr(kv_transfer_config, "engine_id", None))
        if compat_sig:
            return connector_cls(config, role)  # old signature (vllm_config, role)
        return connector_cls(config, role, kv_cache_config)

    @classmethod
    def get_connector_class_by_name(cls, connector_name: str) -> type:
        if connector_name not in cls._registry:
            raise ValueError(f"Connector '{connector_name}' is not registered.")
        return cls._registry[connector_name]()

    @classmethod
    def _get_connector_class_with_compat(cls, kv_transfer_config: Any) -> tuple[type, bool]:
        connector_name = kv_transfer_config.kv_connector
        if connector_name is None:
            raise ValueError("Connector name is not set in KVTransferConfig")
        compat_sig = False
        if connector_name in cls._registry:
            connector_cls = cls._registry[connector_name]()
        else:
            module_path = kv_transfer_config.kv_connector_module_path
            if module_path is None:
                raise ValueError(f"Unsupported connector type: {connector_name}")
            module = importlib.import_module(module_path)
            try:
                connector_cls = getattr(module, connector_name)
            except AttributeError as e:
                raise AttributeError(
                    f"Class {connector_name} not found in {module_path}") from e
            if not supports_kw(connector_cls, "kv_cache_config"):
                compat_sig = True
                logger.warning("Connector %s uses deprecated signature with 2 required "
                               "arguments.", connector_cls.__name__)
        return connector_cls, compat_sig

    @classmethod
    def get_connector_class(cls, kv_transfer_config: Any) -> type:
        return cls._get_connector_class_with_compat(kv_transfer_config)[0]


# As vLLM registers its built-in connectors at import (the rest of its list has no double).
KVConnectorFactory.register_connector(
    "MultiConnector", "vllm.distributed.kv_transfer.kv_connector.v1.multi_connector",
    "MultiConnector")
