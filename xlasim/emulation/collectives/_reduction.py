"""Reductions with TPU semantics, for the collectives that reduce (all_reduce, reduce_scatter).

They combine strictly in rank order, ((x0 op x1) op x2) ... in the input dtype, so every result
is reproducible bit for bit from run to run, whatever the timing.
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
    """Reject reduce types torch_xla does not define, and bitwise ops on floating tensors.

    Args:
        reduce_type: the caller's `xm.REDUCE_*`.
        dtype: the dtype of a tensor it reduces.
    """
    if reduce_type not in REDUCE_TYPES:
        raise ValueError(f"unknown reduce type {reduce_type!r}; torch_xla defines {REDUCE_TYPES}")
    if reduce_type in (REDUCE_AND, REDUCE_OR) and (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"reduce type {reduce_type!r} needs an integer or bool tensor, got {dtype}")


def reduce(reduce_type: str, values: Sequence[torch.Tensor], scale: float = 1.0) -> torch.Tensor:
    """Combine `values` element-wise in rank order, then apply `scale`; a new tensor.

    Args:
        reduce_type: one of `REDUCE_TYPES`.
        values: one tensor per rank, in rank order, of one shape and dtype.
        scale: what the reduction is multiplied by (in the dtype, for integer tensors).
    """
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
