"""xm.all_reduce: every group member gets the element-wise reduction of the group's tensors."""

from __future__ import annotations

from functools import partial

import torch
import torch_xla.utils.utils as xu

from ...base import rank_context
from ...reports import traced_counters
from .. import compile_dispatch as dispatch
from ..transfer import to_device, to_host
from ._arguments import (
    Groups,
    as_list,
    describe_tensors,
    described_call,
    group_of,
    normalized_groups,
    require_xla,
)
from ._delivery import copy_into
from ._record import Args, CollectiveRecord, same_shapes
from ._reduction import check_reduce_type, reduce


def all_reduce(
    reduce_type: str,
    inputs: torch.Tensor | list[torch.Tensor],
    scale: float = 1.0,
    groups: Groups = None,
    pin_layout: bool = True,
):
    """xm.all_reduce: one tensor returns a new tensor; a list is reduced in place and returned.

    As in torch_xla, a world of one skips the reduction (and `scale`): a tensor comes back as a
    clone, a list unchanged, unless `XLA_ALWAYS_ALLREDUCE` is set.

    Args:
        reduce_type: an `xm.REDUCE_*`.
        inputs: a tensor, or a list of tensors reduced in place.
        scale: what the reduction is multiplied by.
        groups: the replica groups (None: the whole world).
        pin_layout: accepted for torch_xla's signature; the emulation has one layout.
    """
    ctx = rank_context.require("xm.all_reduce")
    if ctx.world_size == 1 and not xu.getenv_as("XLA_ALWAYS_ALLREDUCE", bool, False):
        return inputs.clone() if isinstance(inputs, torch.Tensor) else inputs
    tensors, single = as_list(inputs, "inputs")
    require_xla(tensors, "xm.all_reduce")
    traced_counters.bump("AllReduce" if single else "AllReduceInPlace")
    for tensor in tensors:
        check_reduce_type(reduce_type, tensor.dtype)
    members = group_of(ctx.rank, ctx.world_size, groups)
    described = described_call(
        "all_reduce",
        reduce_type=reduce_type,
        scale=scale,
        groups=normalized_groups(groups),
        tensors=describe_tensors(tensors),
    )

    combine = partial(reduce_each, reduce_type, scale)
    reduced = ctx.run.gather(ctx.rank, members, described, to_host(tensors), combine)
    results = to_device(reduced, tensors[0].device)
    if single:
        return results[0]
    copy_into(tensors, results)
    return inputs


def reduce_each(
    reduce_type: str, scale: float, payloads: list[list[torch.Tensor]]
) -> list[torch.Tensor]:
    """The meeting's arithmetic: element-wise, in rank order, one result per input tensor.

    Args:
        reduce_type: an `xm.REDUCE_*`.
        scale: what each reduction is multiplied by.
        payloads: each member's host tensors, in group order.
    """
    return [reduce(reduce_type, column, scale) for column in zip(*payloads)]


def _traced(
    reduce_type: str, inputs: dispatch.Tensors, scale: float, groups: Groups
) -> dispatch.Tensors:
    """xm.all_reduce under dynamo: a list is reduced in place."""
    tensors, single = dispatch.tensor_list(inputs)
    results = dispatch.call(
        "all_reduce", tensors, reduce_type=reduce_type, scale=scale, groups=groups
    )
    if single:
        return results[0]
    dispatch.copy_into(tensors, results)
    return inputs


def _kernel(tensors: list[torch.Tensor], args: Args) -> list[torch.Tensor]:
    return all_reduce(inputs=tensors, **args)


RECORD = CollectiveRecord(
    "all_reduce",
    eager=all_reduce,
    combine=reduce_each,
    traced=_traced,
    shapes=same_shapes,
    kernel=_kernel,
    xlac=("_xla_all_reduce", "_xla_all_reduce_inplace"),
)
