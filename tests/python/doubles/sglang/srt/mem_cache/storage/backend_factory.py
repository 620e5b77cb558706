# TEST DOUBLE (tierkv tests), not SGLang.
# Mirrors python/sglang/srt/mem_cache/storage/backend_factory.py of sgl-project/sglang at
# commit 001067fffe33427bee0ed2f007fb7551a1d76b44: registry with lazy loaders, the
# "dynamic" path (extra_config must carry backend_name/module_path/class_name; the class is
# imported, checked with issubclass(cls, HiCacheStorage) and built as
# `cls(storage_config, kwargs)` -- kwargs passed as ONE positional dict, {} from
# HiCacheController), and built-in construction by name. Only "file" is registered here
# (the other built-ins need native deps). Own code; see /work/specs/sglang.md.
import importlib
import logging
from typing import Any, Dict

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageConfig

logger = logging.getLogger(__name__)


class StorageBackendFactory:
    _registry: Dict[str, Dict[str, Any]] = {}

    @staticmethod
    def _load_backend_class(module_path: str, class_name: str, backend_name: str):
        try:
            module = importlib.import_module(module_path)
            backend_class = getattr(module, class_name)
        except ImportError as e:
            raise ImportError(
                f"Failed to import backend '{backend_name}' from '{module_path}': {e}"
            ) from e
        except AttributeError as e:
            raise AttributeError(
                f"Class '{class_name}' not found in module '{module_path}': {e}"
            ) from e
        if not issubclass(backend_class, HiCacheStorage):
            raise TypeError(f"Backend class {class_name} must inherit from HiCacheStorage")
        return backend_class

    @classmethod
    def register_backend(cls, name: str, module_path: str, class_name: str) -> None:
        if name in cls._registry:
            logger.warning("Backend '%s' is already registered, overwriting", name)

        def loader():
            return cls._load_backend_class(module_path, class_name, name)

        cls._registry[name] = {
            "loader": loader,
            "module_path": module_path,
            "class_name": class_name,
        }

    @classmethod
    def create_backend(
        cls,
        backend_name: str,
        storage_config: HiCacheStorageConfig,
        mem_pool_host: Any,
        **kwargs,
    ) -> HiCacheStorage:
        if backend_name in cls._registry:
            backend_class = cls._registry[backend_name]["loader"]()
            return cls._create_builtin_backend(
                backend_name, backend_class, storage_config, mem_pool_host
            )
        if backend_name == "dynamic" and storage_config.extra_config is not None:
            return cls._create_dynamic_backend(
                storage_config.extra_config, storage_config, mem_pool_host, **kwargs
            )
        raise ValueError(
            f"Unknown storage backend '{backend_name}'. "
            f"Registered backends: {list(cls._registry.keys())}. "
        )

    @classmethod
    def _create_dynamic_backend(
        cls,
        backend_config: Dict[str, Any],
        storage_config: HiCacheStorageConfig,
        mem_pool_host: Any,
        **kwargs,
    ) -> HiCacheStorage:
        for field in ("backend_name", "module_path", "class_name"):
            if field not in backend_config:
                raise ValueError(
                    f"Missing required field '{field}' in backend config for 'dynamic' backend"
                )
        backend_name = backend_config["backend_name"]
        backend_class = cls._load_backend_class(
            backend_config["module_path"], backend_config["class_name"], backend_name
        )
        # NOTE: mem_pool_host is NOT passed; it arrives later via register_mem_pool_host().
        return backend_class(storage_config, kwargs)

    @classmethod
    def _create_builtin_backend(
        cls, backend_name, backend_class, storage_config, mem_pool_host
    ) -> HiCacheStorage:
        if backend_name in ("file", "sim", "nixl"):
            return backend_class(storage_config)
        if backend_name in ("mooncake", "aibrix", "eic", "simm", "mori", "shm", "kvcc"):
            return backend_class(storage_config, mem_pool_host)
        if backend_name == "hf3fs":
            if mem_pool_host.layout in ("page_first", "page_first_direct"):
                bytes_per_page = mem_pool_host.get_ksize_per_token() * mem_pool_host.page_size
            else:
                bytes_per_page = mem_pool_host.get_size_per_token() * mem_pool_host.page_size
            return backend_class.from_env_config(
                bytes_per_page, mem_pool_host.dtype, storage_config
            )
        raise ValueError(f"Unknown built-in backend: {backend_name}")


StorageBackendFactory.register_backend(
    "file", "sglang.srt.mem_cache.hicache_storage", "HiCacheFile"
)
