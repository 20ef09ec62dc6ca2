"""xm.all_to_all: each member splits its tensor and sends piece j to member j."""

from __future__ import annotations

from functools import partial

import torch

from ...base import rank_context
from ...reports import traced_counters
from .. import compile_dispatch as dispatch
from ..transfer import to_device, to_host
from ._arguments import (
    Groups,
    checked_dim,
    describe_tensors,
    described_call,
    group_of,
    normalized_groups,
    require_xla,
)
from ._record import Args, CollectiveRecord, Shape, resized


def all_to_all(
    value: torch.Tensor,
    split_dimension: int,
    concat_dimension: int,
    split_count: int,
    groups: Groups = None,
    pin_layout: bool = True,
) -> torch.Tensor:
    """xm.all_to_all: split along one dim, send piece j to member j, concat what arrives.

    Args:
        value: this member's tensor.
        split_dimension: the dimension cut into `split_count` pieces.
        concat_dimension: the dimension the received pieces are concatenated along.
        split_count: the number of pieces: the group's size.
        groups: the replica groups (None: the whole world), of one size.
        pin_layout: accepted for torch_xla's signature; the emulation has one layout.
    """
    ctx = rank_context.require("xm.all_to_all")
    require_xla([value], "xm.all_to_all")
    traced_counters.bump("AllToAll")
    members = group_of(ctx.rank, ctx.world_size, groups, equal_sizes=True)
    if split_count != len(members):
        raise ValueError(
            f"all_to_all: split_count={split_count} but the replica group has {len(members)} members"
        )
    split_dim = checked_dim(value, split_dimension, "all_to_all")
    concat_dim = checked_dim(value, concat_dimension, "all_to_all")
    if value.size(split_dim) % split_count:
        raise ValueError(
            f"all_to_all: dimension {split_dim} of shape {tuple(value.shape)} "
            f"is not divisible by split_count={split_count}"
        )
    described = described_call(
        "all_to_all",
        split_dimension=split_dimension,
        concat_dimension=concat_dimension,
        split_count=split_count,
        groups=normalized_groups(groups),
        tensors=describe_tensors([value]),
    )

    combine = partial(exchange_pieces, split_dim, concat_dim, split_count)
    received = ctx.run.gather(ctx.rank, members, described, to_host([value]), combine)
    return to_device([received[members.index(ctx.rank)]], value.device)[0]


def exchange_pieces(
    split_dim: int, concat_dim: int, split_count: int, payloads: list[list[torch.Tensor]]
) -> list[torch.Tensor]:
    """The meeting's arithmetic: member j receives piece j of everyone, concatenated in order.

    Args:
        split_dim: the dimension each tensor is cut along (non-negative).
        concat_dim: the dimension the pieces are concatenated along (non-negative).
        split_count: the number of pieces.
        payloads: each member's host tensor (a list of one), in group order.
    """
    pieces = [p[0].split(p[0].size(split_dim) // split_count, split_dim) for p in payloads]
    return [torch.cat([piece[j] for piece in pieces], concat_dim) for j in range(split_count)]


def _traced(
    value: torch.Tensor,
    split_dimension: int,
    concat_dimension: int,
    split_count: int,
    groups: Groups,
) -> torch.Tensor:
    """xm.all_to_all under dynamo."""
    return dispatch.call(
        "all_to_all",
        [value],
        split_dimension=split_dimension,
        concat_dimension=concat_dimension,
        split_count=split_count,
        groups=groups,
    )[0]


def _shapes(shapes: list[Shape], args: Args) -> list[Shape]:
    count = args["split_count"]
    split = [resized(shape, args["split_dimension"], 1, count) for shape in shapes]
    return [resized(shape, args["concat_dimension"], count) for shape in split]


def _kernel(tensors: list[torch.Tensor], args: Args) -> list[torch.Tensor]:
    (value,) = tensors
    return [all_to_all(value, **args)]


RECORD = CollectiveRecord(
    "all_to_all",
    eager=all_to_all,
    combine=exchange_pieces,
    traced=_traced,
    shapes=_shapes,
    kernel=_kernel,
    xlac=("_xla_all_to_all",),
)
