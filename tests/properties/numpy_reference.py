"""What every torch_xla collective returns on each rank, computed in NumPy in the parent.

Written from torch_xla's documented semantics, not from xlasim's code: replica groups partition
the world, members are ordered as the group lists them, all_gather concatenates in that order,
reduce_scatter gives member i the i-th shard, collective_permute gives zeros to ranks no pair
targets, collective_broadcast gives zeros to groups without the root (mask and sum).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch

Groups = Sequence[Sequence[int]] | None

REDUCERS = {
    "sum": np.add,
    "mul": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
}


def group_of(rank: int, world_size: int, groups: Groups) -> tuple[int, ...]:
    if groups is None:
        return tuple(range(world_size))
    return next(tuple(group) for group in groups if rank in group)


def reduce(reduce_type: str, arrays: Sequence[np.ndarray], scale: float = 1.0) -> np.ndarray:
    reduced = functools.reduce(REDUCERS[reduce_type], arrays)
    return reduced * scale if scale != 1.0 else reduced


def all_reduce(
    reduce_type: str, inputs: Sequence[np.ndarray], groups: Groups, scale: float = 1.0
) -> list[np.ndarray]:
    """torch_xla skips the reduction, scale included, in a world of one (its inputs come back
    as they are, unless XLA_ALWAYS_ALLREDUCE is set)."""
    n = len(inputs)
    if n == 1:
        return [inputs[0]]
    return [
        reduce(reduce_type, [inputs[m] for m in group_of(r, n, groups)], scale) for r in range(n)
    ]


def all_gather(inputs: Sequence[np.ndarray], dim: int, groups: Groups) -> list[np.ndarray]:
    n = len(inputs)
    return [np.concatenate([inputs[m] for m in group_of(r, n, groups)], axis=dim) for r in range(n)]


def reduce_scatter(
    reduce_type: str, inputs: Sequence[np.ndarray], scale: float, dim: int, groups: Groups
) -> list[np.ndarray]:
    n = len(inputs)
    results = []
    for rank in range(n):
        group = group_of(rank, n, groups)
        reduced = reduce(reduce_type, [inputs[m] for m in group], scale)
        results.append(np.split(reduced, len(group), axis=dim)[group.index(rank)])
    return results


def all_to_all(
    inputs: Sequence[np.ndarray], split_dim: int, concat_dim: int, groups: Groups
) -> list[np.ndarray]:
    n = len(inputs)
    results = []
    for rank in range(n):
        group = group_of(rank, n, groups)
        mine = group.index(rank)
        pieces = [np.split(inputs[m], len(group), axis=split_dim)[mine] for m in group]
        results.append(np.concatenate(pieces, axis=concat_dim))
    return results


def collective_permute(
    inputs: Sequence[np.ndarray], pairs: Sequence[Sequence[int]]
) -> list[np.ndarray]:
    results = [np.zeros_like(x) for x in inputs]
    for source, target in pairs:
        results[target] = inputs[source]
    return results


def collective_broadcast(
    inputs: Sequence[np.ndarray], root: int, groups: Groups
) -> list[np.ndarray]:
    n = len(inputs)
    return [
        inputs[root] if root in group_of(r, n, groups) else np.zeros_like(inputs[r])
        for r in range(n)
    ]


def as_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A rank's CPU result as float64 or int64 (exact for every dtype drawn, bfloat16 included)."""
    wide = torch.float64 if tensor.is_floating_point() else torch.int64
    return tensor.to(wide).numpy()


def assert_per_rank_equal(
    results: Sequence[torch.Tensor], expected: Sequence[np.ndarray], dtype: torch.dtype
) -> None:
    """Every rank's result has `dtype` and exactly the expected values."""
    assert len(results) == len(expected)
    for rank, (result, want) in enumerate(zip(results, expected)):
        assert result.dtype == dtype, f"rank {rank}: dtype {result.dtype}, expected {dtype}"
        np.testing.assert_array_equal(as_numpy(result), want, err_msg=f"on rank {rank}")
