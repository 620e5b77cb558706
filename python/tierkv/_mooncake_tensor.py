"""Mooncake's batch and "with_parallelism" tensor calls, written over the per-key calls the C++
binding provides (store_py.cpp in kvcache-ai/Mooncake names them; docs/python.md).

tierkv stores a tensor as one object (or one per TP shard with the ``_tp`` calls); Mooncake's
``TensorParallelism`` / ``writer_partition`` requests (a writer storing its slice of a sharded
tensor) have no tierkv counterpart yet: passing one raises ValueError instead of storing
something else than asked."""


def _no_partition(call, *requests):
    for r in requests:
        if r is not None:
            raise ValueError(
                f"{call}: tierkv does not support TensorParallelism or writer_partition requests "
                "(pass None; use put_tensor_with_tp for TP shards)")


def _each(results):
    return [int(r) for r in results]


def batch_put_tensor_with_tp(self, base_keys, tensors_list, tp_rank=0, tp_size=1, split_dim=0):
    if len(base_keys) != len(tensors_list):
        return [int(self._invalid_params)] * len(base_keys)
    return _each(self.put_tensor_with_tp(k, t, tp_rank=tp_rank, tp_size=tp_size,
                                         split_dim=split_dim)
                 for k, t in zip(base_keys, tensors_list))


def batch_get_tensor_with_tp(self, base_keys, tp_rank=0, tp_size=1):
    return [self.get_tensor_with_tp(k, tp_rank=tp_rank, tp_size=tp_size) for k in base_keys]


def _from_each(self, write, keys, buffer_ptrs, sizes):
    if len(keys) != len(buffer_ptrs) or len(keys) != len(sizes):
        return [int(self._invalid_params)] * len(keys)
    return _each(write(k, p, n) for k, p, n in zip(keys, buffer_ptrs, sizes))


def batch_put_tensor_from(self, keys, buffer_ptrs, sizes):
    return _from_each(self, self.put_tensor_from, keys, buffer_ptrs, sizes)


def batch_upsert_tensor_from(self, keys, buffer_ptrs, sizes):
    return _from_each(self, self.upsert_tensor_from, keys, buffer_ptrs, sizes)


def put_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None,
                                writer_partition=None):
    _no_partition("put_tensor_with_parallelism", parallelism, writer_partition)
    return self.put_tensor(key, tensor, config)


def upsert_tensor_with_parallelism(self, key, tensor, parallelism=None, config=None,
                                   writer_partition=None):
    _no_partition("upsert_tensor_with_parallelism", parallelism, writer_partition)
    return self.upsert_tensor(key, tensor, config)


def batch_put_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None, config=None,
                                      writer_partitions=None):
    _no_partition("batch_put_tensor_with_parallelism", parallelisms, writer_partitions)
    return self.batch_put_tensor(keys, tensors_list, config)


def batch_upsert_tensor_with_parallelism(self, keys, tensors_list, parallelisms=None,
                                         config=None, writer_partitions=None):
    _no_partition("batch_upsert_tensor_with_parallelism", parallelisms, writer_partitions)
    return self.batch_upsert_tensor(keys, tensors_list, config)


def _check_config(call, config):
    if config is not None:
        raise ValueError(f"{call}: a ReplicateConfig is not taken by the *_from tensor calls "
                         "of tierkv yet (pass None)")


def put_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None, config=None,
                                     writer_partition=None):
    _no_partition("put_tensor_with_parallelism_from", parallelism, writer_partition)
    _check_config("put_tensor_with_parallelism_from", config)
    return self.put_tensor_from(key, buffer_ptr, size)


def upsert_tensor_with_parallelism_from(self, key, buffer_ptr, size, parallelism=None,
                                        config=None, writer_partition=None):
    _no_partition("upsert_tensor_with_parallelism_from", parallelism, writer_partition)
    _check_config("upsert_tensor_with_parallelism_from", config)
    return self.upsert_tensor_from(key, buffer_ptr, size)


def batch_put_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None,
                                           config=None, writer_partitions=None):
    _no_partition("batch_put_tensor_with_parallelism_from", parallelisms, writer_partitions)
    _check_config("batch_put_tensor_with_parallelism_from", config)
    return self.batch_put_tensor_from(keys, buffer_ptrs, sizes)


def batch_upsert_tensor_with_parallelism_from(self, keys, buffer_ptrs, sizes, parallelisms=None,
                                              config=None, writer_partitions=None):
    _no_partition("batch_upsert_tensor_with_parallelism_from", parallelisms, writer_partitions)
    _check_config("batch_upsert_tensor_with_parallelism_from", config)
    return self.batch_upsert_tensor_from(keys, buffer_ptrs, sizes)


CALLS = [
    batch_put_tensor_with_tp, batch_get_tensor_with_tp, batch_put_tensor_from,
    batch_upsert_tensor_from, put_tensor_with_parallelism, upsert_tensor_with_parallelism,
    batch_put_tensor_with_parallelism, batch_upsert_tensor_with_parallelism,
    put_tensor_with_parallelism_from, upsert_tensor_with_parallelism_from,
    batch_put_tensor_with_parallelism_from, batch_upsert_tensor_with_parallelism_from,
]


def attach(cls, invalid_params):
    """Adds the calls above to the binding's store class."""
    cls._invalid_params = invalid_params
    for fn in CALLS:
        setattr(cls, fn.__name__, fn)
