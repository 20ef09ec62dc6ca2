"""What a rank passes to a collective, checked as torch_xla checks it, and described for the
meeting (the arguments that must agree across ranks, and the user's source line)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch

from ...base import rank_context
from ...reports.callsite import call_location
from ..rendezvous import Call

Groups = Sequence[Sequence[int]] | None

#: Set while the compiled path's kernel runs a collective on host copies of its inputs.
_on_host_copies: ContextVar[bool] = ContextVar("on_host_copies", default=False)


@contextmanager
def host_copies() -> Iterator[None]:
    """Within: the collectives run on host copies of XLA tensors (the compiled path's kernel,
    `compiled.py`), which `require_xla` lets through."""
    token = _on_host_copies.set(True)
    try:
        yield
    finally:
        _on_host_copies.reset(token)


def require_xla(tensors: Sequence[torch.Tensor], api: str, output: Any = None) -> None:
    """Refuse tensors that are not on an XLA device, as torch_xla's collectives do on a TPU
    (a CPU tensor reaches `torch.ops._c10d_functional` with no process group, or
    `_XLAC._xla_all_reduce` and its siblings, which take XLA tensors only).

    Args:
        tensors: the caller's input tensors.
        api: the collective the caller called (`xm.all_reduce`).
        output: the caller's `output` argument (a tensor, a list of them, or None).
    """
    if _on_host_copies.get():
        return
    outputs = [] if output is None else as_list(output, "output")[0]
    for tensor in [*tensors, *outputs]:
        if tensor.device.type != "xla":
            ctx = rank_context.require(api)
            raise RuntimeError(
                f"{api} on rank {ctx.rank} got a tensor on {tensor.device} "
                f"({describe_tensors([tensor])}): torch_xla's collectives take tensors on an XLA "
                "device and refuse others on a TPU; move it there first "
                "(`tensor.to(torch_xla.device())`). torch.distributed's object collectives "
                "make such tensors over the `xla` backend unless given `device=` "
                "(pytorch/xla#5492)"
            )


def normalized_groups(groups: Groups) -> tuple[tuple[int, ...], ...] | None:
    """`groups` as tuples of ints (what a call's description holds), None for the whole world."""
    if not groups:
        return None
    return tuple(tuple(int(r) for r in group) for group in groups)


def group_of(rank: int, size: int, groups: Groups, *, equal_sizes: bool = False) -> tuple[int, ...]:
    """The replica group `rank` belongs to (all ranks when `groups` is empty).

    Args:
        rank: the calling rank.
        size: the world's size.
        groups: the caller's replica groups.
        equal_sizes: whether the collective needs groups of one size (torch_xla's check).
    """
    normalized = normalized_groups(groups)
    if normalized is None:
        return tuple(range(size))
    seen: set[int] = set()
    for group in normalized:
        for member in group:
            if not 0 <= member < size:
                raise ValueError(
                    f"replica group {list(group)} names rank {member}, outside a world of {size}"
                )
            if member in seen:
                raise ValueError(f"rank {member} appears in more than one replica group: {groups}")
            seen.add(member)
    if equal_sizes and len({len(g) for g in normalized}) > 1:
        raise ValueError(f"replica groups must have the same number of replicas: {groups}")
    for group in normalized:
        if rank in group:
            return group
    raise ValueError(f"rank {rank} is in none of the replica groups {groups}")


def members_here(groups: Groups) -> tuple[int, ...]:
    """The calling rank's replica group of equal-sized `groups` (a compiled op's shape rule)."""
    ctx = rank_context.require("a compiled collective")
    return group_of(ctx.rank, ctx.world_size, groups, equal_sizes=True)


def as_list(
    value: torch.Tensor | Sequence[torch.Tensor], what: str
) -> tuple[list[torch.Tensor], bool]:
    """`value` as a list of tensors, and whether it was one tensor.

    Args:
        value: the caller's tensor or list of tensors.
        what: the parameter's name, for torch_xla's error.
    """
    if isinstance(value, torch.Tensor):
        return [value], True
    if isinstance(value, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value), False
    raise TypeError(f"`{what}` needs to be a Tensor or a list of Tensors, but given {type(value)}.")


def checked_dim(tensor: torch.Tensor, dim: int, what: str) -> int:
    """`dim` of `tensor`, made non-negative; an error naming the collective when out of range.

    Args:
        tensor: the tensor the dimension is of.
        dim: the caller's dimension (negative counts from the end).
        what: the collective's name.
    """
    if tensor.dim() == 0:
        raise ValueError(f"{what} needs a tensor with at least one dimension, got a scalar")
    if not -tensor.dim() <= dim < tensor.dim():
        raise IndexError(f"{what}: dimension {dim} is out of range for shape {tuple(tensor.shape)}")
    return dim % tensor.dim()


def describe_tensors(tensors: Sequence[torch.Tensor]) -> str:
    """Dtypes and shapes, as a call's description and its errors show them: `[float32(4, 2)]`."""
    return (
        "["
        + ", ".join(f"{str(t.dtype).removeprefix('torch.')}{tuple(t.shape)}" for t in tensors)
        + "]"
    )


def described_call(op: str, **signature: Any) -> Call:
    """This rank's call as the meeting compares it with the others': op, the arguments that must
    agree, and the user's source line.

    Args:
        op: the collective's name.
        signature: the arguments that must agree across the group, by name.
    """
    return Call(op, tuple(signature.items()), call_location())
