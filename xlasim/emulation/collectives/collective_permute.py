"""xm.collective_permute: each pair's source sends its tensor to the pair's target."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import torch

from ...base import rank_context
from .. import compile_dispatch as dispatch
from ..transfer import to_device, to_host
from ._arguments import describe_tensors, described_call, require_xla
from ._record import Args, CollectiveRecord, same_shapes

Pairs = tuple[tuple[int, int], ...]


def collective_permute(value: torch.Tensor, pairs: list[list[int]]) -> torch.Tensor:
    """xm.collective_permute: every rank takes part; a rank no pair targets receives zeros.

    Args:
        value: this rank's tensor, sent where a pair names this rank as its source.
        pairs: (source, target) ranks; no source and no target twice.
    """
    ctx = rank_context.require("xm.collective_permute")
    require_xla([value], "xm.collective_permute")
    normalized = _checked_pairs(pairs, ctx.world_size)
    members = tuple(range(ctx.world_size))
    described = described_call(
        "collective_permute", pairs=normalized, tensors=describe_tensors([value])
    )

    combine = partial(permute, normalized)
    received = ctx.run.gather(ctx.rank, members, described, to_host([value]), combine)
    return to_device([received[ctx.rank]], value.device)[0]


def permute(pairs: Pairs, payloads: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """The meeting's arithmetic: a target receives its source's tensor; zeros where no pair targets.

    Args:
        pairs: (source, target) ranks, checked.
        payloads: each rank's host tensor (a list of one), in rank order.
    """
    received = [torch.zeros_like(p[0]) for p in payloads]
    for source, target in pairs:
        received[target] = payloads[source][0].clone()
    return received


def _checked_pairs(pairs: Sequence[Sequence[int]], size: int) -> Pairs:
    normalized = tuple((int(s), int(t)) for s, t in pairs)
    for source, target in normalized:
        if not (0 <= source < size and 0 <= target < size):
            raise ValueError(
                f"collective_permute pair ({source}, {target}) is outside a world of {size}"
            )
    for index, name in ((0, "source"), (1, "target")):
        column = [p[index] for p in normalized]
        if len(set(column)) != len(column):
            raise ValueError(f"collective_permute: a {name} appears twice in pairs {list(pairs)}")
    return normalized


def _traced(value: torch.Tensor, pairs: list[list[int]]) -> torch.Tensor:
    """xm.collective_permute under dynamo."""
    return dispatch.call("collective_permute", [value], pairs=pairs)[0]


def _kernel(tensors: list[torch.Tensor], args: Args) -> list[torch.Tensor]:
    (value,) = tensors
    return [collective_permute(value, **args)]


RECORD = CollectiveRecord(
    "collective_permute",
    eager=collective_permute,
    combine=permute,
    traced=_traced,
    shapes=same_shapes,
    kernel=_kernel,
    xlac=("_xla_collective_permute",),
)
