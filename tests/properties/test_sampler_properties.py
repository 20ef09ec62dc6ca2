"""Sampler sharding on real ranks, through the strategy's data path (`with_distributed_sampler`
with `distributed_sampler_kwargs`, then `process_dataloader` and `set_epoch`), over drawn dataset
lengths, world sizes, batch sizes, shuffle, seed, drop_last and epochs.

The parent sees only each rank's shard, and checks them together: interleaving the shards in
global rank order (rank r's i-th sample at position i * world_size + r) must give a prefix of
one permutation of the dataset followed by the padding `DistributedSampler` documents (the
first samples again). That single property says the shards are disjoint except for that
padding, have equal lengths, cover the dataset, and come from the same permutation on every
rank. With shuffle off the permutation is the identity; with shuffle on it changes with the
epoch. Without it, every core would train on the same data (pytorch/xla #7904), or shards would
overlap when a rank is off by one or local instead of global (Lightning #16802).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from drawing import budget
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from strategy import XLAStrategy
from strategy.sampling import set_epoch, with_distributed_sampler

#: Shuffled prefixes at least this long differ between two epochs with overwhelming
#: probability (1 / 40320 for 8 of 8 samples), so "changes with the epoch" is checked on them.
DISTINCT_PREFIX = 8


class Stream(IterableDataset):
    """An iterable dataset of the samples 0..length-1, in order."""

    def __init__(self, length: int):
        self.length = length

    def __iter__(self) -> Iterator[tuple[torch.Tensor]]:
        return ((torch.tensor(i),) for i in range(self.length))


@dataclass(frozen=True)
class SamplerCase:
    world_size: int
    length: int
    batch_size: int
    iterable: bool
    shuffle: bool
    drop_last: bool
    seed: int
    epochs: tuple[int, ...]

    def loader(self) -> DataLoader:
        """The loader a user writes, without any sampler: the strategy must shard it."""
        if self.iterable:
            return DataLoader(Stream(self.length), self.batch_size, drop_last=self.drop_last)
        dataset = TensorDataset(torch.arange(self.length))
        return DataLoader(dataset, self.batch_size, shuffle=self.shuffle, drop_last=self.drop_last)

    def shard_length(self) -> int:
        """Samples each rank sees: its shard (padded up, or, for streams, complete groups only),
        cut to whole batches with drop_last."""
        if self.iterable:
            shard = self.length // self.world_size
        else:
            shard = math.ceil(self.length / self.world_size)
        return shard // self.batch_size * self.batch_size if self.drop_last else shard


@st.composite
def sampler_cases(draw: st.DrawFn, world_sizes) -> SamplerCase:
    iterable = draw(st.booleans())
    return SamplerCase(
        world_size=draw(st.sampled_from(world_sizes)),
        length=draw(st.integers(1, 40)),
        batch_size=draw(st.integers(1, 4)),
        iterable=iterable,
        shuffle=False if iterable else draw(st.booleans()),
        drop_last=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
        epochs=tuple(draw(st.lists(st.integers(0, 5), min_size=2, max_size=3, unique=True))),
    )


def shards_on_rank(case: SamplerCase) -> list[list[int]]:
    """This rank's samples, epoch by epoch, as the device loader delivers them."""
    strategy = XLAStrategy()
    strategy.setup_environment()
    sharded = with_distributed_sampler(
        case.loader(), **strategy.distributed_sampler_kwargs, seed=case.seed
    )
    device_loader = strategy.process_dataloader(sharded)
    seen = []
    for epoch in case.epochs:
        set_epoch(device_loader, epoch)
        seen.append([i for (batch,) in device_loader for i in batch.cpu().reshape(-1).tolist()])
    return seen


def interleave(shards: list[list[int]]) -> list[int]:
    """Sample i of rank r at position i * world_size + r."""
    return [sample for samples in zip(*shards) for sample in samples]


def check_one_epoch(case: SamplerCase, shards: list[list[int]]) -> list[int]:
    """The properties of one epoch's shards; returns their interleaving."""
    lengths = [len(shard) for shard in shards]
    assert lengths == [case.shard_length()] * case.world_size, f"shard lengths {lengths}"
    order = interleave(shards)
    n = case.length
    assert len(set(order[:n])) == len(order[:n]), f"a sample is repeated before padding: {order}"
    assert all(0 <= sample < n for sample in order), f"samples outside the dataset: {order}"
    assert all(order[i] == order[i - n] for i in range(n, len(order))), (
        f"padding is not the first samples again: {order}"
    )
    if not case.drop_last and not case.iterable:
        assert sorted(set(order)) == list(range(n)), "the shards do not cover the dataset"
    if case.iterable:  # whole groups of world_size items, in stream order
        assert order == list(range(len(order))), f"stream shards out of order: {order}"
    elif not case.shuffle:
        assert order == [i % n for i in range(len(order))], f"unshuffled order {order}"
    return order


@budget(100)
@given(data=st.data())
def test_shards_interleave_into_one_padded_permutation_per_epoch(xla_world, world_sizes, data):
    case = data.draw(sampler_cases(world_sizes), label="case")

    per_rank = xla_world.run_on(case.world_size, shards_on_rank, case)

    orders = [
        check_one_epoch(case, [seen[e] for seen in per_rank]) for e in range(len(case.epochs))
    ]
    if case.shuffle and min(len(orders[0]), case.length) >= DISTINCT_PREFIX:
        assert len({tuple(order) for order in orders}) == len(orders), (
            f"the permutation did not change with the epoch: {orders}"
        )
    elif not case.shuffle:
        assert all(order == orders[0] for order in orders), "an unshuffled order changed"
