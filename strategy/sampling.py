"""Data for data-parallel training: one shard per replica, uploaded by `MpDeviceLoader`.

Nothing shards the data unless a `DistributedSampler` is put in the loader: forgetting it trains
every core on the same batches (pytorch/xla #7904). So map-style loaders get one inserted
(`num_replicas` = world size, `rank` = *global* rank: a local rank here gives "Invalid rank"
errors or duplicated shards on multi-host slices, Lightning #16802), with the loader's shuffle
setting and one seed for every rank; iterable datasets are split item by item. A loader that
already has a `DistributedSampler` is left alone.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    Sampler,
)
from torch_xla.distributed.parallel_loader import MpDeviceLoader


class ReplicaShard(IterableDataset):
    """Replica `rank`'s share of an iterable dataset: item `rank` of every complete group of
    `num_replicas` items. An incomplete last group is dropped, so that every replica yields the
    same number of items and runs the same number of steps (and of collectives)."""

    def __init__(self, dataset: IterableDataset, num_replicas: int, rank: int):
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank

    def __iter__(self) -> Iterator[Any]:
        items = iter(self.dataset)
        while group := list(itertools.islice(items, self.num_replicas)):
            if len(group) < self.num_replicas:
                return
            yield group[self.rank]


def _sampler_of(loader: DataLoader) -> Sampler | None:
    if isinstance(loader.batch_sampler, BatchSampler):
        return loader.batch_sampler.sampler
    return loader.sampler


def _rebuilt(loader: DataLoader, **changes: Any) -> DataLoader:
    """A DataLoader like `loader` with some constructor arguments changed."""
    if type(loader) is not DataLoader:
        raise TypeError(
            f"cannot insert a distributed sampler into a {type(loader).__name__} (a DataLoader "
            "subclass whose constructor is unknown here): give it a DistributedSampler yourself "
            "or pass use_distributed_sampler=False"
        )
    batches = loader.batch_sampler
    if batches is not None and type(batches) is not BatchSampler:
        raise TypeError(
            f"cannot insert a distributed sampler into the custom batch_sampler "
            f"{type(batches).__name__}: shard it yourself (build it on a DistributedSampler) or "
            "pass use_distributed_sampler=False"
        )
    arguments = {
        "dataset": loader.dataset,
        # a plain BatchSampler given by the user: the loader's own batch_size is None
        "batch_size": loader.batch_size if batches is None else batches.batch_size,
        "num_workers": loader.num_workers,
        "collate_fn": loader.collate_fn,
        "pin_memory": loader.pin_memory,
        "drop_last": loader.drop_last if batches is None else batches.drop_last,
        "timeout": loader.timeout,
        "worker_init_fn": loader.worker_init_fn,
        "multiprocessing_context": loader.multiprocessing_context,
        "generator": loader.generator,
        "prefetch_factor": loader.prefetch_factor,
        "persistent_workers": loader.persistent_workers,
        "pin_memory_device": loader.pin_memory_device,
        "in_order": loader.in_order,
    }
    arguments.update(changes)
    return DataLoader(**arguments)


def with_distributed_sampler(
    loader: DataLoader, num_replicas: int, rank: int, seed: int = 0, *, evaluation: bool = False
) -> DataLoader:
    """`loader` sharded for replica `rank` of `num_replicas` (global rank and world size).

    Idempotent: a loader already sharded (by this function or by its own DistributedSampler)
    comes back unchanged.
    """
    if isinstance(loader, MpDeviceLoader):
        raise TypeError(
            "insert the distributed sampler before wrapping the loader with process_dataloader"
        )
    if not 0 <= rank < num_replicas:
        raise ValueError(f"rank {rank} is not a replica of a world of {num_replicas}")
    dataset = loader.dataset
    if isinstance(dataset, IterableDataset):
        if isinstance(dataset, ReplicaShard):
            return loader
        return _rebuilt(loader, dataset=ReplicaShard(dataset, num_replicas, rank))
    sampler = _sampler_of(loader)
    if isinstance(sampler, DistributedSampler):
        if (sampler.num_replicas, sampler.rank) != (num_replicas, rank):
            warnings.warn(
                f"the loader's own DistributedSampler has num_replicas={sampler.num_replicas}, "
                f"rank={sampler.rank}, but this is global rank {rank} of {num_replicas}: it is "
                "left alone, check that this is what you meant",
                UserWarning,
                stacklevel=2,
            )
        return loader
    if evaluation and len(dataset) % num_replicas:
        padding = num_replicas - len(dataset) % num_replicas
        warnings.warn(
            f"evaluating {len(dataset)} samples on {num_replicas} replicas: DistributedSampler "
            f"pads the shards with {padding} repeated sample(s), so they count twice in the "
            "reduced metrics. Use a dataset size divisible by the world size for exact results.",
            UserWarning,
            stacklevel=2,
        )
    shuffle = isinstance(sampler, RandomSampler) and not evaluation
    distributed = DistributedSampler(
        dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed
    )
    return _rebuilt(loader, sampler=distributed)


def set_epoch(loader: DataLoader | MpDeviceLoader, epoch: int) -> None:
    """Tell the loader's sampler which epoch starts (DistributedSampler reshuffles by epoch)."""
    if isinstance(loader, MpDeviceLoader):
        loader = loader._loader
    sampler = _sampler_of(loader)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)


def to_device_loader(loader: Any, device: torch.device) -> MpDeviceLoader:
    """`loader` wrapped in `MpDeviceLoader` (background upload to `device`), once.

    A loader already wrapped comes back as is (Lightning PR #16571 wrapped twice); the wrapper
    exposes `dataset` and `batch_sampler` like a DataLoader.
    """
    if isinstance(loader, MpDeviceLoader):
        return loader
    wrapped = MpDeviceLoader(loader, device)
    wrapped.dataset = getattr(loader, "dataset", None)
    wrapped.batch_sampler = getattr(loader, "batch_sampler", None)
    return wrapped
