"""xm.collective_broadcast: every group member's tensors take the root's values, in place."""

from __future__ import annotations

from functools import partial

import torch

from ...base import rank_context
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


def collective_broadcast(
    tensors: list[torch.Tensor],
    root_ordinal: int = 0,
    groups: Groups = None,
    pin_layout: bool = True,
) -> None:
    """xm.collective_broadcast: in place, every tensor takes the root's value (zeros in groups
    without the root, as torch_xla's mask-and-sum implementation gives).

    Args:
        tensors: this rank's tensors, overwritten.
        root_ordinal: the rank whose values everyone takes.
        groups: the replica groups (None: the whole world).
        pin_layout: accepted for torch_xla's signature; the emulation has one layout.
    """
    ctx = rank_context.require("xm.collective_broadcast")
    tensors, _ = as_list(tensors, "tensors")
    require_xla(tensors, "xm.collective_broadcast")
    if not 0 <= root_ordinal < ctx.world_size:
        raise ValueError(
            f"collective_broadcast: root_ordinal={root_ordinal} outside a world of {ctx.world_size}"
        )
    members = group_of(ctx.rank, ctx.world_size, groups)
    described = described_call(
        "collective_broadcast",
        root_ordinal=root_ordinal,
        groups=normalized_groups(groups),
        tensors=describe_tensors(tensors),
    )

    root_index = members.index(root_ordinal) if root_ordinal in members else None
    combine = partial(from_root, root_index)
    values = ctx.run.gather(ctx.rank, members, described, to_host(tensors), combine)
    copy_into(tensors, to_device(values, tensors[0].device))


def from_root(root_index: int | None, payloads: list[list[torch.Tensor]]) -> list[torch.Tensor]:
    """The meeting's arithmetic: the root's tensors, or zeros in a group without the root.

    Args:
        root_index: the root's place in the group, None when it is not a member.
        payloads: each member's host tensors, in group order.
    """
    if root_index is None:
        return [torch.zeros_like(t) for t in payloads[0]]
    return [t.clone() for t in payloads[root_index]]


def _traced(tensors: list[torch.Tensor], root_ordinal: int, groups: Groups) -> None:
    """xm.collective_broadcast under dynamo (in place)."""
    values = dispatch.call(
        "collective_broadcast", list(tensors), root_ordinal=root_ordinal, groups=groups
    )
    dispatch.copy_into(tensors, values)


def _kernel(tensors: list[torch.Tensor], args: Args) -> list[torch.Tensor]:
    collective_broadcast(tensors, **args)
    return tensors


RECORD = CollectiveRecord(
    "collective_broadcast",
    eager=collective_broadcast,
    combine=from_root,
    traced=_traced,
    shapes=same_shapes,
    kernel=_kernel,
)
