"""xm.all_gather: every group member gets the group's tensors concatenated, in group order."""

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
    members_here,
    normalized_groups,
    require_xla,
)
from ._delivery import deliver
from ._record import Args, CollectiveRecord, Shape, resized


def all_gather(
    value: torch.Tensor | list[torch.Tensor],
    dim: int = 0,
    groups: Groups = None,
    output: torch.Tensor | list[torch.Tensor] | None = None,
    pin_layout: bool = True,
    channel_id: Any = None,
    use_global_device_ids: Any = None,
):
    """xm.all_gather: concatenate every group member's tensor along `dim`, in group order.

    Args:
        value: a tensor, or a list of tensors each gathered on its own.
        dim: the dimension to concatenate along.
        groups: the replica groups (None: the whole world), of one size.
        output: tensors to write the results into, as torch_xla's `_out` forms do.
        pin_layout: torch_xla refuses True with a list; the emulation has one layout.
        channel_id: accepted for torch_xla's signature; unused, as on one slice.
        use_global_device_ids: accepted for torch_xla's signature; unused, as on one slice.
    """
    ctx = rank_context.require("xm.all_gather")
    tensors, single = as_list(value, "value")
    require_xla(tensors, "xm.all_gather", output)
    if not single and pin_layout:
        raise RuntimeError(
            "For xm.all_gather with list of tensors input, pin_layout=True is not yet supported."
        )
    if single:
        traced_counters.bump("AllGather" if output is None else "AllGatherOut")
    dims = [checked_dim(t, dim, "all_gather") for t in tensors]
    members = group_of(ctx.rank, ctx.world_size, groups, equal_sizes=True)
    described = described_call(
        "all_gather", dim=dim, groups=normalized_groups(groups), tensors=describe_tensors(tensors)
    )

    combine = partial(concat_each, dims)
    gathered = ctx.run.gather(ctx.rank, members, described, to_host(tensors), combine)
    results = to_device(gathered, tensors[0].device)
    return deliver(results, output, single)


def concat_each(dims: list[int], payloads: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """The meeting's arithmetic: every member's tensor concatenated along its dim.

    Args:
        dims: each input's dimension to concatenate along (non-negative).
        payloads: each member's host tensors, in group order.
    """
    return [torch.cat(column, dim) for column, dim in zip(zip(*payloads), dims)]


def _traced(
    value: dispatch.Tensors, dim: int, groups: Groups, output: dispatch.Tensors | None
) -> dispatch.Tensors:
    """xm.all_gather under dynamo."""
    tensors, single = dispatch.tensor_list(value)
    results = dispatch.call("all_gather", tensors, dim=dim, groups=groups)
    return dispatch.deliver(results, output, single)


def _shapes(shapes: list[Shape], args: Args) -> list[Shape]:
    members = len(members_here(args["groups"]))
    return [resized(shape, args["dim"], members) for shape in shapes]


def _kernel(tensors: list[torch.Tensor], args: Args) -> list[torch.Tensor]:
    return all_gather(tensors, pin_layout=False, **args)


RECORD = CollectiveRecord(
    "all_gather",
    eager=all_gather,
    combine=concat_each,
    traced=_traced,
    shapes=_shapes,
    kernel=_kernel,
    xlac=(
        "_xla_all_gather",
        "_xla_all_gather_out",
        "_xla_all_gather_coalesced",
        "_xla_all_gather_coalesced_out",
    ),
)
