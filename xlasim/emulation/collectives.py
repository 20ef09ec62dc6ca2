"""Emulated torch_xla collectives: same names, signatures and results as `torch_xla.core.xla_model`.

Each call describes itself (op, arguments that must agree across ranks, user source line),
fetches its inputs to the host, meets its replica group in the run's rendezvous, where the
result is computed once, and uploads the result back to the input's device in the input's dtype.
These are the eager functions; `collective_registry.py` makes each `xm.<name>` of them (with its
traced twin, or cutting the graph, under `torch.compile`).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
import torch_xla
import torch_xla.utils.utils as xu

from ..base import rank_context
from ..reports import traced_counters
from ..reports.callsite import call_location
from . import combine as combining
from .combine import check_reduce_type
from .rendezvous import Call
from .transfer import to_device, to_host

Groups = Sequence[Sequence[int]] | None


# ------------------------------------------------------------------------------ helpers


def _describe_tensors(tensors: Sequence[torch.Tensor]) -> str:
    return (
        "["
        + ", ".join(f"{str(t.dtype).removeprefix('torch.')}{tuple(t.shape)}" for t in tensors)
        + "]"
    )


def _call(op: str, **signature: Any) -> Call:
    return Call(op, tuple(signature.items()), call_location())


def _normalize_groups(groups: Groups) -> tuple[tuple[int, ...], ...] | None:
    if not groups:
        return None
    return tuple(tuple(int(r) for r in group) for group in groups)


def group_of(rank: int, size: int, groups: Groups, *, equal_sizes: bool = False) -> tuple[int, ...]:
    """The replica group `rank` belongs to (all ranks when `groups` is empty)."""
    normalized = _normalize_groups(groups)
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


def _index_in(rank: int, members: tuple[int, ...]) -> int:
    return members.index(rank)


def _copy_into(targets: Sequence[torch.Tensor], values: Sequence[torch.Tensor]) -> None:
    """Write results into caller-given tensors; as torch_xla's `_out` ops do, an output whose
    shape differs from the result (a full-size buffer for a shard) takes the result's shape."""
    with torch.no_grad():
        for target, value in zip(targets, values):
            if target.shape != value.shape:
                target.resize_(value.shape)
            target.copy_(value)


def _deliver(results: list[torch.Tensor], output: Any, single: bool):
    """Return results as torch_xla does: into `output` when given, else one tensor or a list."""
    if output is None:
        return results[0] if single else results
    outputs, _ = _as_list(output, "output")
    if len(outputs) != len(results):
        raise ValueError(
            f"`output` length doesn't match `input` length: {len(outputs)} vs {len(results)}."
        )
    _copy_into(outputs, results)
    return output


def _as_list(
    value: torch.Tensor | Sequence[torch.Tensor], what: str
) -> tuple[list[torch.Tensor], bool]:
    if isinstance(value, torch.Tensor):
        return [value], True
    if isinstance(value, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in value):
        return list(value), False
    raise TypeError(f"`{what}` needs to be a Tensor or a list of Tensors, but given {type(value)}.")


def _dim(tensor: torch.Tensor, dim: int, what: str) -> int:
    if tensor.dim() == 0:
        raise ValueError(f"{what} needs a tensor with at least one dimension, got a scalar")
    if not -tensor.dim() <= dim < tensor.dim():
        raise IndexError(f"{what}: dimension {dim} is out of range for shape {tuple(tensor.shape)}")
    return dim % tensor.dim()


# ------------------------------------------------------------------------------ all_reduce


def all_reduce(
    reduce_type: str,
    inputs: torch.Tensor | list[torch.Tensor],
    scale: float = 1.0,
    groups: Groups = None,
    pin_layout: bool = True,
):
    """xm.all_reduce: one tensor returns a new tensor; a list is reduced in place and returned.

    As in torch_xla, a world of one skips the reduction (and `scale`): a tensor comes back as a
    clone, a list unchanged, unless `XLA_ALWAYS_ALLREDUCE` is set."""
    ctx = rank_context.require("xm.all_reduce")
    if ctx.world_size == 1 and not xu.getenv_as("XLA_ALWAYS_ALLREDUCE", bool, False):
        return inputs.clone() if isinstance(inputs, torch.Tensor) else inputs
    tensors, single = _as_list(inputs, "inputs")
    traced_counters.bump("AllReduce" if single else "AllReduceInPlace")
    for tensor in tensors:
        check_reduce_type(reduce_type, tensor.dtype)
    members = group_of(ctx.rank, ctx.world_size, groups)
    call = _call(
        "all_reduce",
        reduce_type=reduce_type,
        scale=scale,
        groups=_normalize_groups(groups),
        tensors=_describe_tensors(tensors),
    )

    combine = partial(combining.reduce_each, reduce_type, scale)
    reduced = ctx.run.gather(ctx.rank, members, call, to_host(tensors), combine)
    results = to_device(reduced, tensors[0].device)
    if single:
        return results[0]
    _copy_into(tensors, results)
    return inputs


# ------------------------------------------------------------------------------ all_gather


def all_gather(
    value: torch.Tensor | list[torch.Tensor],
    dim: int = 0,
    groups: Groups = None,
    output: torch.Tensor | list[torch.Tensor] | None = None,
    pin_layout: bool = True,
    channel_id=None,
    use_global_device_ids=None,
):
    """xm.all_gather: concatenate every group member's tensor along `dim`, in group order."""
    ctx = rank_context.require("xm.all_gather")
    tensors, single = _as_list(value, "value")
    if not single and pin_layout:
        raise RuntimeError(
            "For xm.all_gather with list of tensors input, pin_layout=True is not yet supported."
        )
    if single:
        traced_counters.bump("AllGather" if output is None else "AllGatherOut")
    dims = [_dim(t, dim, "all_gather") for t in tensors]
    members = group_of(ctx.rank, ctx.world_size, groups, equal_sizes=True)
    call = _call(
        "all_gather", dim=dim, groups=_normalize_groups(groups), tensors=_describe_tensors(tensors)
    )

    combine = partial(combining.concat_each, dims)
    gathered = ctx.run.gather(ctx.rank, members, call, to_host(tensors), combine)
    results = to_device(gathered, tensors[0].device)
    return _deliver(results, output, single)


# ------------------------------------------------------------------------------ reduce_scatter


def reduce_scatter(
    reduce_type: str,
    input: torch.Tensor | list[torch.Tensor],
    scale: float,
    scatter_dim: int,
    shard_count: int,
    groups: Groups = None,
    output: torch.Tensor | list[torch.Tensor] | None = None,
    pin_layout: bool = True,
    channel_id=None,
    use_global_device_ids=None,
):
    """xm.reduce_scatter: reduce over the group, then each member keeps its shard of `scatter_dim`."""
    ctx = rank_context.require("xm.reduce_scatter")
    tensors, single = _as_list(input, "input")
    if single:
        traced_counters.bump("ReduceScatter" if output is None else "ReduceScatterOut")
    members = group_of(ctx.rank, ctx.world_size, groups, equal_sizes=True)
    if shard_count != len(members):
        raise ValueError(
            f"reduce_scatter: shard_count={shard_count} but the replica group has {len(members)} members"
        )
    dims = [_dim(t, scatter_dim, "reduce_scatter") for t in tensors]
    for tensor, d in zip(tensors, dims):
        check_reduce_type(reduce_type, tensor.dtype)
        if tensor.size(d) % shard_count:
            raise ValueError(
                f"reduce_scatter: dimension {d} of shape {tuple(tensor.shape)} "
                f"is not divisible by shard_count={shard_count}"
            )
    call = _call(
        "reduce_scatter",
        reduce_type=reduce_type,
        scale=scale,
        scatter_dim=scatter_dim,
        shard_count=shard_count,
        groups=_normalize_groups(groups),
        tensors=_describe_tensors(tensors),
    )

    combine = partial(combining.reduce_then_split, reduce_type, scale, dims, shard_count)
    shards = ctx.run.gather(ctx.rank, members, call, to_host(tensors), combine)
    mine = _index_in(ctx.rank, members)
    results = to_device([s[mine] for s in shards], tensors[0].device)
    return _deliver(results, output, single)


# ------------------------------------------------------------------------------ all_to_all


def all_to_all(
    value: torch.Tensor,
    split_dimension: int,
    concat_dimension: int,
    split_count: int,
    groups: Groups = None,
    pin_layout: bool = True,
) -> torch.Tensor:
    """xm.all_to_all: split along one dim, send piece j to member j, concat what arrives."""
    ctx = rank_context.require("xm.all_to_all")
    traced_counters.bump("AllToAll")
    members = group_of(ctx.rank, ctx.world_size, groups, equal_sizes=True)
    if split_count != len(members):
        raise ValueError(
            f"all_to_all: split_count={split_count} but the replica group has {len(members)} members"
        )
    split_dim = _dim(value, split_dimension, "all_to_all")
    concat_dim = _dim(value, concat_dimension, "all_to_all")
    if value.size(split_dim) % split_count:
        raise ValueError(
            f"all_to_all: dimension {split_dim} of shape {tuple(value.shape)} "
            f"is not divisible by split_count={split_count}"
        )
    call = _call(
        "all_to_all",
        split_dimension=split_dimension,
        concat_dimension=concat_dimension,
        split_count=split_count,
        groups=_normalize_groups(groups),
        tensors=_describe_tensors([value]),
    )

    combine = partial(combining.exchange_pieces, split_dim, concat_dim, split_count)
    received = ctx.run.gather(ctx.rank, members, call, to_host([value]), combine)
    return to_device([received[_index_in(ctx.rank, members)]], value.device)[0]


# ------------------------------------------------------------------------------ permute / broadcast


def _check_pairs(pairs: Sequence[Sequence[int]], size: int) -> tuple[tuple[int, int], ...]:
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


def collective_permute(value: torch.Tensor, pairs: list[list[int]]) -> torch.Tensor:
    """xm.collective_permute: every rank takes part; a rank no pair targets receives zeros."""
    ctx = rank_context.require("xm.collective_permute")
    normalized = _check_pairs(pairs, ctx.world_size)
    members = tuple(range(ctx.world_size))
    call = _call("collective_permute", pairs=normalized, tensors=_describe_tensors([value]))

    combine = partial(combining.permute, normalized)
    received = ctx.run.gather(ctx.rank, members, call, to_host([value]), combine)
    return to_device([received[ctx.rank]], value.device)[0]


def collective_broadcast(
    tensors: list[torch.Tensor],
    root_ordinal: int = 0,
    groups: Groups = None,
    pin_layout: bool = True,
) -> None:
    """xm.collective_broadcast: in place, every tensor takes the root's value (zeros in groups
    without the root, as torch_xla's mask-and-sum implementation gives)."""
    ctx = rank_context.require("xm.collective_broadcast")
    tensors, _ = _as_list(tensors, "tensors")
    if not 0 <= root_ordinal < ctx.world_size:
        raise ValueError(
            f"collective_broadcast: root_ordinal={root_ordinal} outside a world of {ctx.world_size}"
        )
    members = group_of(ctx.rank, ctx.world_size, groups)
    call = _call(
        "collective_broadcast",
        root_ordinal=root_ordinal,
        groups=_normalize_groups(groups),
        tensors=_describe_tensors(tensors),
    )

    root_index = members.index(root_ordinal) if root_ordinal in members else None
    combine = partial(combining.from_root, root_index)
    values = ctx.run.gather(ctx.rank, members, call, to_host(tensors), combine)
    _copy_into(tensors, to_device(values, tensors[0].device))


# ------------------------------------------------------------------------------ send / recv


def send(value: torch.Tensor, channel_id: int) -> torch.Tensor:
    """xm.send: post the value on a channel; returns the input, as torch_xla does."""
    ctx = rank_context.require("xm.send")
    call = _call("send", channel_id=channel_id, tensors=_describe_tensors([value]))
    ctx.run.send(ctx.rank, ("xm", channel_id), call, to_host([value])[0])
    return value


def recv(output: torch.Tensor, channel_id: int) -> torch.Tensor:
    """xm.recv: take the oldest value posted on a channel into `output`."""
    ctx = rank_context.require("xm.recv")
    call = _call("recv", channel_id=channel_id, tensors=_describe_tensors([output]))
    sent_by, value = ctx.run.receive(ctx.rank, ("xm", channel_id), call)
    check_received(value, output, sent_by, call)
    _copy_into([output], to_device([value.clone()], output.device))  # never alias the sender
    return output


def check_received(
    value: torch.Tensor, output: torch.Tensor, sent_by: Call, received_by: Call
) -> None:
    """A receive buffer must have the shape and dtype of what was sent."""
    if value.shape != output.shape or value.dtype != output.dtype:
        raise ValueError(
            f"recv buffer {_describe_tensors([output])} does not match the tensor sent "
            f"{_describe_tensors([value])}: sent by {sent_by.describe()}, "
            f"received by {received_by.describe()}"
        )


# ------------------------------------------------------------------------------ rendezvous


def xla_rendezvous(
    payload: bytes = b"", ordinals: list[int] | None = None, tag: str | None = None
) -> list[bytes]:
    """xm.xla_rendezvous: every rank's payload, in ordinal order. As in torch_xla 2.9, only a
    rendezvous of the whole world is supported (`ordinals`, if given, must name every rank)."""
    ctx = rank_context.require("xm.rendezvous")
    if ordinals and len(ordinals) != ctx.world_size:
        raise ValueError("Only global rendezvous is supported")
    if not isinstance(payload, bytes):
        raise TypeError(f"`payload` must be bytes, not {type(payload)}")
    members = tuple(range(ctx.world_size))
    torch_xla.sync()
    call = _call("rendezvous", tag=tag, replicas=members)
    payloads = list(ctx.run.gather(ctx.rank, members, call, payload))
    # torch_xla's rendezvous cuts the graph twice more (after gathering the sizes, and after the
    # payloads unless all are empty); every cut advances the device's random stream, so the
    # emulation cuts where it does (docs/fidelity.md, "Random streams").
    torch_xla.sync()
    if any(payloads):
        torch_xla.sync()
    return payloads


def rendezvous(tag: str, payload: bytes = b"", replicas: list[int] = []) -> list[bytes]:  # noqa: B006
    """xm.rendezvous: wait for every replica at `tag` and return all their payloads."""
    return xla_rendezvous(payload, replicas or None, tag=tag)
