"""Collectives that reach XLA below torch_xla's Python API: served where possible, refused else.

- `torch.ops._c10d_functional.*` (torch.distributed's traceable collectives: what dynamo turns
  `dist.all_reduce` and friends into, and what `torch.distributed._functional_collectives`
  calls) have XLA kernels in torch_xla that build in-graph XLA collectives, which the CPU client
  cannot run across emulated cores. They get XLA kernels here that run the emulated collective
  through `xlasim::collective` (eagerly, or as an opaque node of a compiled graph).
- `torch_xla._XLAC._xla_all_reduce` and its siblings build the same in-graph collectives and
  have no emulated equivalent at that level: on a rank they raise instead of hanging the process
  (each collective's record lists its own, `collectives/`; `compiled.patches` installs
  the refusals).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

from ..base import rank_context
from ..base.errors import UnsupportedCollectiveError
from ..reports import traced_counters
from . import compile_dispatch

#: c10d reduce op names (and torch_xla's own) -> xm reduce types; torch_xla has no avg or xor.
_REDUCE_TYPES = {
    "sum": "sum",
    "product": "mul",
    "mul": "mul",
    "min": "min",
    "max": "max",
    "band": "and",
    "and": "and",
    "bor": "or",
    "or": "or",
}


def _reduce_type(reduce_op: str) -> str:
    try:
        return _REDUCE_TYPES[reduce_op.lower()]
    except KeyError:
        raise ValueError(
            f"torch_xla's collectives have no reduce op {reduce_op!r} "
            f"(they support {sorted(set(_REDUCE_TYPES))})"
        ) from None


def _world_size() -> int:
    return rank_context.require("a torch.distributed collective on XLA tensors").world_size


def _ranks(group_name: str, group_size: int | None) -> list[int]:
    """The global ranks of a named process group. Names no group was registered under (torch_xla
    itself passes "") mean the first `group_size` ranks, or the world, as torch_xla's kernels do."""
    try:
        group = c10d._resolve_process_group(group_name)
    except RuntimeError:
        return list(range(_world_size() if group_size is None else group_size))
    return dist.get_process_group_ranks(group)


def _groups(group_name: str, group_size: int | None = None) -> list[list[int]] | None:
    """xm's `groups` for a process group: None for the whole world."""
    ranks = _ranks(group_name, group_size)
    if group_size is not None and group_size != len(ranks):
        raise ValueError(f"group_size={group_size}, but group {group_name!r} has ranks {ranks}")
    return None if ranks == list(range(_world_size())) else [ranks]


def _reduce(tensors: list[torch.Tensor], reduce_op: str, group_name: str) -> list[torch.Tensor]:
    return compile_dispatch.call(
        "all_reduce",
        tensors,
        reduce_type=_reduce_type(reduce_op),
        scale=1.0,
        groups=_groups(group_name),
    )


def _gather(tensors: list[torch.Tensor], group_size: int, group_name: str) -> list[torch.Tensor]:
    return compile_dispatch.call(
        "all_gather", tensors, dim=0, groups=_groups(group_name, group_size)
    )


def _scatter(
    tensors: list[torch.Tensor], reduce_op: str, group_size: int, group_name: str
) -> list[torch.Tensor]:
    return compile_dispatch.call(
        "reduce_scatter",
        tensors,
        reduce_type=_reduce_type(reduce_op),
        scale=1.0,
        scatter_dim=0,
        shard_count=group_size,
        groups=_groups(group_name, group_size),
    )


def _broadcast(input: torch.Tensor, src: int, group_name: str) -> torch.Tensor:
    """`src` is a rank of the group, as c10d's root rank is."""
    root = _ranks(group_name, None)[src]
    return compile_dispatch.call(
        "collective_broadcast", [input], root_ordinal=root, groups=_groups(group_name)
    )[0]


def _all_to_all_single(
    input: torch.Tensor,
    output_split_sizes: list[int],
    input_split_sizes: list[int],
    group_name: str,
) -> torch.Tensor:
    ranks = _ranks(group_name, None)
    if len(set(output_split_sizes) | set(input_split_sizes)) > 1:
        raise ValueError("torch_xla does not support arbitrary split sizes for all_to_all")
    return compile_dispatch.call(
        "all_to_all",
        [input],
        split_dimension=0,
        concat_dimension=0,
        split_count=len(ranks),
        groups=_groups(group_name),
    )[0]


#: XLA kernels of the functional `_c10d_functional` ops. Not wait_tensor: its composite kernel
#: returns a tensor with no pending work as it is. Not the in-place ones (all_reduce_, ...): XLA
#: tensors go through functionalization, which refuses them before any XLA kernel is reached.
C10D_KERNELS: dict[str, Callable[..., Any]] = {
    "all_reduce": lambda t, op, name: _reduce([t], op, name)[0],
    "all_reduce_coalesced": _reduce,
    "all_gather_into_tensor": lambda t, size, name: _gather([t], size, name)[0],
    "all_gather_into_tensor_coalesced": _gather,
    "reduce_scatter_tensor": lambda t, op, size, name: _scatter([t], op, size, name)[0],
    "reduce_scatter_tensor_coalesced": _scatter,
    "all_to_all_single": _all_to_all_single,
    "broadcast": _broadcast,
}


#: The functional ops whose torch_xla kernels count themselves (`cross_replica_reduces.cpp`).
COUNTED = ("all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "all_to_all_single")


def _counted(name: str, kernel: Callable[..., Any]) -> Callable[..., Any]:
    def counted_kernel(*args: Any) -> Any:
        with traced_counters.traced_as(name):
            return kernel(*args)

    return counted_kernel


def register(library: torch.library.Library) -> None:
    """Override the XLA kernels of `_c10d_functional` in `library` (kind IMPL, key XLA)."""
    for name, kernel in C10D_KERNELS.items():
        library.impl(
            name, _counted(name, kernel) if name in COUNTED else kernel, allow_override=True
        )


# ------------------------------------------------------------------------------ torch_xla._XLAC


def refuse_on_ranks(name: str, instead: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """`torch_xla._XLAC.<name>`, raising on an emulated rank (elsewhere it is the original).

    Args:
        name: the `_XLAC` function (an alias in a collective's record, `collectives/`).
        instead: the `xm` collective the error tells the rank to call.
        original: torch_xla's function.
    """

    def xla_collective(*args: Any, **kwargs: Any) -> Any:
        if rank_context.current() is None:
            return original(*args, **kwargs)
        raise UnsupportedCollectiveError(
            f"torch_xla._XLAC.{name} builds an XLA collective into the rank's graph, which XLA's "
            "CPU client cannot run across emulated cores (it would hang, then abort the process). "
            f"Call xm.{instead} (or torch.distributed), which the emulation serves."
        )

    xla_collective.__name__ = name
    xla_collective.__wrapped__ = original
    return xla_collective
