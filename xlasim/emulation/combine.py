"""What a completed rendezvous computes, once, from every participant's host payload.

Reductions have TPU semantics and combine strictly in rank order, ((x0 op x1) op x2) ... in the
input dtype, so every result is reproducible bit for bit from run to run, whatever the timing.

Module-level functions (bound with `functools.partial`) rather than closures, so that ranks in
worker processes can send them to the rendezvous host by pickle. Each takes `payloads`: one list
of tensors per participant, in participant order. Payloads may be views of XLA device buffers;
results are always new memory, since they are handed to the ranks' devices as views and must
never alias a buffer XLA owns (XLA may reuse that memory once the buffer is donated).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX = (
    "sum",
    "mul",
    "and",
    "or",
    "min",
    "max",
)
REDUCE_TYPES = (REDUCE_SUM, REDUCE_MUL, REDUCE_AND, REDUCE_OR, REDUCE_MIN, REDUCE_MAX)

_Combine = Callable[[torch.Tensor, torch.Tensor], None]

_NUMERIC: dict[str, _Combine] = {
    REDUCE_SUM: lambda acc, x: acc.add_(x),
    REDUCE_MUL: lambda acc, x: acc.mul_(x),
    REDUCE_MIN: lambda acc, x: torch.minimum(acc, x, out=acc),
    REDUCE_MAX: lambda acc, x: torch.maximum(acc, x, out=acc),
    REDUCE_AND: lambda acc, x: acc.bitwise_and_(x),
    REDUCE_OR: lambda acc, x: acc.bitwise_or_(x),
}
# On booleans XLA's add is OR and multiply is AND.
_BOOLEAN: dict[str, _Combine] = {
    REDUCE_SUM: lambda acc, x: acc.logical_or_(x),
    REDUCE_OR: lambda acc, x: acc.logical_or_(x),
    REDUCE_MAX: lambda acc, x: acc.logical_or_(x),
    REDUCE_MUL: lambda acc, x: acc.logical_and_(x),
    REDUCE_AND: lambda acc, x: acc.logical_and_(x),
    REDUCE_MIN: lambda acc, x: acc.logical_and_(x),
}


def check_reduce_type(reduce_type: str, dtype: torch.dtype) -> None:
    """Reject reduce types torch_xla does not define, and bitwise ops on floating tensors."""
    if reduce_type not in REDUCE_TYPES:
        raise ValueError(f"unknown reduce type {reduce_type!r}; torch_xla defines {REDUCE_TYPES}")
    if reduce_type in (REDUCE_AND, REDUCE_OR) and (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"reduce type {reduce_type!r} needs an integer or bool tensor, got {dtype}")


def reduce(reduce_type: str, values: Sequence[torch.Tensor], scale: float = 1.0) -> torch.Tensor:
    """Combine `values` (one per rank, in rank order) element-wise, then apply `scale`."""
    table = _BOOLEAN if values[0].dtype == torch.bool else _NUMERIC
    combine = table[reduce_type]
    acc = values[0].clone()
    for value in values[1:]:
        combine(acc, value)
    if scale != 1.0:
        if acc.dtype.is_floating_point:
            acc.mul_(scale)
        else:
            acc = (acc * scale).to(acc.dtype)
    return acc


Payloads = list[list[torch.Tensor]]


def reduce_each(reduce_type: str, scale: float, payloads: Payloads) -> list[torch.Tensor]:
    """all_reduce: element-wise, rank order, one result per input tensor."""
    return [reduce(reduce_type, column, scale) for column in zip(*payloads)]


def concat_each(dims: list[int], payloads: Payloads) -> list[torch.Tensor]:
    """all_gather: every participant's tensor concatenated along its dim."""
    return [torch.cat(column, dim) for column, dim in zip(zip(*payloads), dims)]


def reduce_then_split(
    reduce_type: str, scale: float, dims: list[int], shard_count: int, payloads: Payloads
) -> list[tuple[torch.Tensor, ...]]:
    """reduce_scatter: per input, the reduced tensor cut into `shard_count` shards."""
    shards = []
    for column, dim in zip(zip(*payloads), dims):
        reduced = reduce(reduce_type, column, scale)
        shards.append(reduced.split(reduced.size(dim) // shard_count, dim))
    return shards


def exchange_pieces(
    split_dim: int, concat_dim: int, split_count: int, payloads: Payloads
) -> list[torch.Tensor]:
    """all_to_all: participant j receives piece j of everyone, concatenated in order."""
    pieces = [p[0].split(p[0].size(split_dim) // split_count, split_dim) for p in payloads]
    return [torch.cat([piece[j] for piece in pieces], concat_dim) for j in range(split_count)]


def permute(pairs: tuple[tuple[int, int], ...], payloads: Payloads) -> list[torch.Tensor]:
    """collective_permute: target receives its source's tensor; zeros where no pair targets."""
    received = [torch.zeros_like(p[0]) for p in payloads]
    for source, target in pairs:
        received[target] = payloads[source][0].clone()
    return received


def from_root(root_index: int | None, payloads: Payloads) -> list[torch.Tensor]:
    """collective_broadcast: the root's tensors, or zeros in a group without the root."""
    if root_index is None:
        return [torch.zeros_like(t) for t in payloads[0]]
    return [t.clone() for t in payloads[root_index]]
