"""Every emulated `xm` collective as one record: the one place to read, or add, a collective.

A record names the collective's eager function (`collectives.py`), the arithmetic its completed
meeting runs (`combine.py`), and holds what the rest of the emulation needs of it: the traced
twin dynamo records in its place (a call of the `xlasim::collective` op, `compile_dispatch.py`)
or none when it cuts the graph, the op's shape rule and kernel (`compiled.py`), and the
`torch_xla._XLAC` functions that build it in-graph, refused on ranks (`xla_level.py`).
`patches.py` installs `xm_function()` of each record; the op's kernels, the `_XLAC` refusals
and tests/core/test_collective_registry.py iterate `REGISTRY`, whose names are
`base/collective_names.py`'s (the list tracing records, `events/hooks.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ..base import rank_context
from . import collectives
from . import combine as combining
from .compile_dispatch import (
    Tensors,
    between_graphs,
    call,
    copy_into,
    deliver,
    tensor_list,
    traced_as,
)

Args = dict[str, Any]
Shape = Sequence[int]
#: Result shapes from input shapes and the op's arguments (the fake kernel, and placeholders).
ShapeRule = Callable[[list[Shape], Args], list[Shape]]
#: The emulated collective on this rank, on host copies of the op's inputs.
Kernel = Callable[[list[torch.Tensor], Args], list[torch.Tensor]]


@dataclass(frozen=True)
class CollectiveRecord:
    """One `xm` collective: everything the emulation knows of it, by its torch_xla name.

    Args:
        name: its `xm.<name>`.
        eager: the emulated function (`collectives.py`), torch_xla's signature.
        combine: the arithmetic of its completed meeting (`combine.py`), None when the meeting
            only hands payloads on (send, recv, rendezvous).
        traced: what dynamo traces in its place (a call of the op), None when it cuts the graph.
        shapes: the op's result shapes, with `traced`.
        kernel: the op's kernel, with `traced`.
        xlac: the `torch_xla._XLAC` functions that build it in-graph (refused on ranks).
    """

    name: str
    eager: Callable[..., Any]
    combine: Callable[..., Any] | None
    traced: Callable[..., Any] | None = None
    shapes: ShapeRule | None = None
    kernel: Kernel | None = None
    xlac: tuple[str, ...] = ()

    @property
    def cuts_graph(self) -> bool:
        """Whether dynamo breaks the graph at it (it runs eagerly between graphs)."""
        return self.traced is None

    def xm_function(self) -> Callable[..., Any]:
        """The function installed as `xm.<name>`: the eager one, or its traced twin under dynamo."""
        if self.traced is None:
            return between_graphs(self.eager)
        return traced_as(self.traced)(self.eager)


# ------------------------------------------------------------------------------ shape helpers


def _same(shapes: list[Shape], args: Args) -> list[Shape]:
    return shapes


def _resized(shape: Shape, dim: int, factor: int, divisor: int = 1) -> list[int]:
    sizes = list(shape)
    dim %= len(sizes)
    sizes[dim] = sizes[dim] * factor // divisor
    return sizes


def _members(groups: Any) -> tuple[int, ...]:
    ctx = rank_context.require("a compiled collective")
    return collectives.group_of(ctx.rank, ctx.world_size, groups, equal_sizes=True)


# ------------------------------------------------------------------------------ all_reduce


def _all_reduce_traced(reduce_type: str, inputs: Tensors, scale: float, groups: Any) -> Tensors:
    """xm.all_reduce under dynamo: a list is reduced in place."""
    tensors, single = tensor_list(inputs)
    results = call("all_reduce", tensors, reduce_type=reduce_type, scale=scale, groups=groups)
    if single:
        return results[0]
    copy_into(tensors, results)
    return inputs


ALL_REDUCE = CollectiveRecord(
    "all_reduce",
    eager=collectives.all_reduce,
    combine=combining.reduce_each,
    traced=_all_reduce_traced,
    shapes=_same,
    kernel=lambda ts, a: collectives.all_reduce(a["reduce_type"], ts, a["scale"], a["groups"]),
    xlac=("_xla_all_reduce", "_xla_all_reduce_inplace"),
)

# ------------------------------------------------------------------------------ all_gather


def _all_gather_traced(value: Tensors, dim: int, groups: Any, output: Tensors | None) -> Tensors:
    """xm.all_gather under dynamo."""
    tensors, single = tensor_list(value)
    return deliver(call("all_gather", tensors, dim=dim, groups=groups), output, single)


ALL_GATHER = CollectiveRecord(
    "all_gather",
    eager=collectives.all_gather,
    combine=combining.concat_each,
    traced=_all_gather_traced,
    shapes=lambda shapes, a: [_resized(s, a["dim"], len(_members(a["groups"]))) for s in shapes],
    kernel=lambda ts, a: collectives.all_gather(ts, a["dim"], a["groups"], pin_layout=False),
    xlac=(
        "_xla_all_gather",
        "_xla_all_gather_out",
        "_xla_all_gather_coalesced",
        "_xla_all_gather_coalesced_out",
    ),
)

# ------------------------------------------------------------------------------ reduce_scatter


def _reduce_scatter_traced(
    reduce_type: str,
    input: Tensors,
    scale: float,
    scatter_dim: int,
    shard_count: int,
    groups: Any,
    output: Tensors | None,
) -> Tensors:
    """xm.reduce_scatter under dynamo."""
    tensors, single = tensor_list(input)
    results = call(
        "reduce_scatter",
        tensors,
        reduce_type=reduce_type,
        scale=scale,
        scatter_dim=scatter_dim,
        shard_count=shard_count,
        groups=groups,
    )
    return deliver(results, output, single)


REDUCE_SCATTER = CollectiveRecord(
    "reduce_scatter",
    eager=collectives.reduce_scatter,
    combine=combining.reduce_then_split,
    traced=_reduce_scatter_traced,
    shapes=lambda shapes, a: [_resized(s, a["scatter_dim"], 1, a["shard_count"]) for s in shapes],
    kernel=lambda ts, a: collectives.reduce_scatter(
        a["reduce_type"], ts, a["scale"], a["scatter_dim"], a["shard_count"], a["groups"]
    ),
    xlac=(
        "_xla_reduce_scatter",
        "_xla_reduce_scatter_out",
        "_xla_reduce_scatter_coalesced",
        "_xla_reduce_scatter_coalesced_out",
    ),
)

# ------------------------------------------------------------------------------ all_to_all


def _all_to_all_traced(
    value: torch.Tensor, split_dimension: int, concat_dimension: int, split_count: int, groups: Any
) -> torch.Tensor:
    """xm.all_to_all under dynamo."""
    return call(
        "all_to_all",
        [value],
        split_dimension=split_dimension,
        concat_dimension=concat_dimension,
        split_count=split_count,
        groups=groups,
    )[0]


def _all_to_all_shapes(shapes: list[Shape], args: Args) -> list[Shape]:
    count = args["split_count"]
    split = [_resized(s, args["split_dimension"], 1, count) for s in shapes]
    return [_resized(s, args["concat_dimension"], count) for s in split]


ALL_TO_ALL = CollectiveRecord(
    "all_to_all",
    eager=collectives.all_to_all,
    combine=combining.exchange_pieces,
    traced=_all_to_all_traced,
    shapes=_all_to_all_shapes,
    kernel=lambda ts, a: [
        collectives.all_to_all(
            ts[0], a["split_dimension"], a["concat_dimension"], a["split_count"], a["groups"]
        )
    ],
    xlac=("_xla_all_to_all",),
)

# ------------------------------------------------------------------------------ collective_permute


def _collective_permute_traced(value: torch.Tensor, pairs: Any) -> torch.Tensor:
    """xm.collective_permute under dynamo."""
    return call("collective_permute", [value], pairs=pairs)[0]


COLLECTIVE_PERMUTE = CollectiveRecord(
    "collective_permute",
    eager=collectives.collective_permute,
    combine=combining.permute,
    traced=_collective_permute_traced,
    shapes=_same,
    kernel=lambda ts, a: [collectives.collective_permute(ts[0], a["pairs"])],
    xlac=("_xla_collective_permute",),
)

# ------------------------------------------------------------------------------ collective_broadcast


def _collective_broadcast_traced(
    tensors: list[torch.Tensor], root_ordinal: int, groups: Any
) -> None:
    """xm.collective_broadcast under dynamo (in place)."""
    values = call("collective_broadcast", list(tensors), root_ordinal=root_ordinal, groups=groups)
    copy_into(tensors, values)


def _broadcast_kernel(tensors: list[torch.Tensor], args: Args) -> list[torch.Tensor]:
    collectives.collective_broadcast(tensors, args["root_ordinal"], args["groups"])
    return tensors


COLLECTIVE_BROADCAST = CollectiveRecord(
    "collective_broadcast",
    eager=collectives.collective_broadcast,
    combine=combining.from_root,
    traced=_collective_broadcast_traced,
    shapes=_same,
    kernel=_broadcast_kernel,
)

# ------------------------------------------------------------------------------ between graphs

SEND = CollectiveRecord("send", eager=collectives.send, combine=None, xlac=("_xla_send",))
RECV = CollectiveRecord("recv", eager=collectives.recv, combine=None, xlac=("_xla_recv",))
XLA_RENDEZVOUS = CollectiveRecord("xla_rendezvous", eager=collectives.xla_rendezvous, combine=None)
RENDEZVOUS = CollectiveRecord("rendezvous", eager=collectives.rendezvous, combine=None)

# ------------------------------------------------------------------------------ the registry

#: Every emulated collective by name, in `base/collective_names.py`'s order.
REGISTRY: dict[str, CollectiveRecord] = {
    c.name: c
    for c in (
        ALL_REDUCE,
        ALL_GATHER,
        REDUCE_SCATTER,
        ALL_TO_ALL,
        COLLECTIVE_PERMUTE,
        COLLECTIVE_BROADCAST,
        SEND,
        RECV,
        XLA_RENDEZVOUS,
        RENDEZVOUS,
    )
}

#: `torch_xla._XLAC` collectives -> the `xm` collective a rank should call instead.
XLAC_ALIASES: dict[str, str] = {alias: c.name for c in REGISTRY.values() for alias in c.xlac}
