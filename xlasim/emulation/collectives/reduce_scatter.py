"""xm.reduce_scatter: the group's reduction, cut into shards; each member keeps its own."""

from __future__ import annotations

from functools import partial
from typing import Any

import torch

from ...base import rank_context
from ...reports import traced_counters
from .. import compile_dispatch as dispatch
from ..transfer import to_device, to_host
from ._arguments import (
    Groups,
    as_list,
    checked_dim,
    describe_tensors,
    described_call,
    group_of,
    normalized_groups,
    require_xla,
)
from ._delivery import deliver
from ._record import Args, CollectiveRecord, Shape, resized
from ._reduction import check_reduce_type, reduce


def reduce_scatter(
    reduce_type: str,
    input: torch.Tensor | list[torch.Tensor],
    scale: float,
    scatter_dim: int,
    shard_count: int,
    groups: Groups = None,
    output: torch.Tensor | list[torch.Tensor] | None = None,
    pin_layout: bool = True,
    channel_id: Any = None,
    use_global_device_ids: Any = None,
):
    """xm.reduce_scatter: reduce over the group, then each member keeps its shard of `scatter_dim`.

    Args:
        reduce_type: an `xm.REDUCE_*`.
        input: a tensor, or a list of tensors each reduced and scattered on its own.
        scale: what the reduction is multiplied by.
        scatter_dim: the dimension cut into shards.
        shard_count: the number of shards: the group's size.
        groups: the replica groups (None: the whole world), of one size.
        output: tensors to write the shards into, as torch_xla's `_out` forms do.
        pin_layout: accepted for torch_xla's signature; the emulation has one layout.
        channel_id: accepted for torch_xla's signature; unused, as on one slice.
        use_global_device_ids: accepted for torch_xla's signature; unused, as on one slice.
    """
    ctx = rank_context.require("xm.reduce_scatter")
    tensors, single = as_list(input, "input")
    require_xla(tensors, "xm.reduce_scatter", output)
    if single:
        traced_counters.bump("ReduceScatter" if output is None else "ReduceScatterOut")
    members = group_of(ctx.rank, ctx.world_size, groups, equal_sizes=True)
    if shard_count != len(members):
        raise ValueError(
            f"reduce_scatter: shard_count={shard_count} but the replica group has {len(members)} members"
        )
    dims = [checked_dim(t, scatter_dim, "reduce_scatter") for t in tensors]
    for tensor, d in zip(tensors, dims):
        check_reduce_type(reduce_type, tensor.dtype)
        if tensor.size(d) % shard_count:
            raise ValueError(
                f"reduce_scatter: dimension {d} of shape {tuple(tensor.shape)} "
                f"is not divisible by shard_count={shard_count}"
            )
    described = described_call(
        "reduce_scatter",
        reduce_type=reduce_type,
        scale=scale,
        scatter_dim=scatter_dim,
        shard_count=shard_count,
        groups=normalized_groups(groups),
        tensors=describe_tensors(tensors),
    )

    combine = partial(reduce_then_split, reduce_type, scale, dims, shard_count)
    shards = ctx.run.gather(ctx.rank, members, described, to_host(tensors), combine)
    mine = members.index(ctx.rank)
    results = to_device([s[mine] for s in shards], tensors[0].device)
    return deliver(results, output, single)


def reduce_then_split(
    reduce_type: str,
    scale: float,
    dims: list[int],
    shard_count: int,
    payloads: list[list[torch.Tensor]],
) -> list[tuple[torch.Tensor, ...]]:
    """The meeting's arithmetic: per input, the reduced tensor cut into `shard_count` shards.

    Args:
        reduce_type: an `xm.REDUCE_*`.
        scale: what each reduction is multiplied by.
        dims: each input's scatter dimension (non-negative).
        shard_count: the number of shards.
        payloads: each member's host tensors, in group order.
    """
    shards = []
    for column, dim in zip(zip(*payloads), dims):
        reduced = reduce(reduce_type, column, scale)
        shards.append(reduced.split(reduced.size(dim) // shard_count, dim))
    return shards


def _traced(
    reduce_type: str,
    input: dispatch.Tensors,
    scale: float,
    scatter_dim: int,
    shard_count: int,
    groups: Groups,
    output: dispatch.Tensors | None,
) -> dispatch.Tensors:
    """xm.reduce_scatter under dynamo."""
    tensors, single = dispatch.tensor_list(input)
    results = dispatch.call(
        "reduce_scatter",
        tensors,
        reduce_type=reduce_type,
        scale=scale,
        scatter_dim=scatter_dim,
        shard_count=shard_count,
        groups=groups,
    )
    return dispatch.deliver(results, output, single)


def _shapes(shapes: list[Shape], args: Args) -> list[Shape]:
    return [resized(shape, args["scatter_dim"], 1, args["shard_count"]) for shape in shapes]


def _kernel(tensors: list[torch.Tensor], args: Args) -> list[torch.Tensor]:
    return reduce_scatter(input=tensors, **args)


RECORD = CollectiveRecord(
    "reduce_scatter",
    eager=reduce_scatter,
    combine=reduce_then_split,
    traced=_traced,
    shapes=_shapes,
    kernel=_kernel,
    xlac=(
        "_xla_reduce_scatter",
        "_xla_reduce_scatter_out",
        "_xla_reduce_scatter_coalesced",
        "_xla_reduce_scatter_coalesced_out",
    ),
)
