"""The strategy's collectives on torch_xla's replica API, for a world of more than one rank.

Every function here is a collective: every rank must call it, in the same order, with arguments
of the same shape (on a TPU a rank that does not hangs the slice). Results come back on the
device the input was on (Lightning PR #18275 returned CPU tensors for XLA inputs).
"""

from __future__ import annotations

import pickle
from typing import Any

import torch
import torch_xla
import torch_xla.core.functions as xf
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch.distributed import ReduceOp

from .serialization import dumps_for_ranks

#: reduce_op names (and torch.distributed ReduceOps) to (xm reduce type, divide by world size).
_REDUCE_OPS: dict[Any, tuple[str, bool]] = {
    "sum": (xm.REDUCE_SUM, False),
    "mean": (xm.REDUCE_SUM, True),
    "avg": (xm.REDUCE_SUM, True),
    "max": (xm.REDUCE_MAX, False),
    "min": (xm.REDUCE_MIN, False),
    ReduceOp.SUM: (xm.REDUCE_SUM, False),
    ReduceOp.AVG: (xm.REDUCE_SUM, True),
    ReduceOp.MAX: (xm.REDUCE_MAX, False),
    ReduceOp.MIN: (xm.REDUCE_MIN, False),
}
_MAX_BROADCAST_BYTES = 2**31 - 1  # the length travels as one int32


def parse_reduce_op(reduce_op: str | ReduceOp | None) -> tuple[str, bool]:
    """(xm reduce type, whether to divide by the world size) for a reduce_op; None means mean."""
    key = "mean" if reduce_op is None else reduce_op
    if isinstance(key, str):
        key = key.lower()
    try:
        return _REDUCE_OPS[key]
    except (KeyError, TypeError):
        raise ValueError(
            f"reduce_op={reduce_op!r} is not supported on global rank {xr.global_ordinal()}: use "
            "'mean' (or 'avg'), 'sum', 'max' or 'min' (or the matching torch.distributed.ReduceOp)"
        ) from None


def reduce(
    tensor: torch.Tensor, reduce_op: str | ReduceOp | None, device: torch.device
) -> torch.Tensor:
    """All-reduce `tensor` over every replica; the result is on `tensor`'s device.

    A mean of an integer tensor is computed in float32 (a mean is not an integer).
    """
    reduce_type, mean = parse_reduce_op(reduce_op)
    value = tensor.detach().to(device)
    if mean and not (value.is_floating_point() or value.is_complex()):
        value = value.float()
    scale = 1.0 / xr.world_size() if mean else 1.0
    return xm.all_reduce(reduce_type, value, scale=scale).to(tensor.device)


def all_gather(tensor: torch.Tensor, device: torch.device, sync_grads: bool) -> torch.Tensor:
    """Stack every replica's `tensor` into shape (world_size, *tensor.shape), on its device.

    With `sync_grads` the result is differentiable through `torch_xla.core.functions.all_gather`:
    each rank's input receives the gradient of its own row as computed on that rank. Without it
    the result is detached.
    """
    stacked = tensor.to(device).unsqueeze(0)
    gathered = xf.all_gather(stacked) if sync_grads else xm.all_gather(stacked.detach())
    return gathered.to(tensor.device)


def barrier(name: str) -> None:
    """Wait until every replica has reached the barrier of the same name."""
    xm.rendezvous(name)


def broadcast_tensor(tensor: torch.Tensor, src: int, device: torch.device) -> torch.Tensor:
    """Rank `src`'s tensor on every rank (same shape and dtype everywhere), on `tensor`'s device.

    Non-source ranks contribute zeros rather than their own values: torch_xla broadcasts by
    masking and summing, so a NaN or inf held by another rank would otherwise poison the result.
    """
    value = tensor.detach().to(device)
    buffer = value.clone() if xr.global_ordinal() == src else torch.zeros_like(value)
    xm.collective_broadcast([buffer], root_ordinal=src)
    return buffer.to(tensor.device)


def broadcast_object(obj: Any, src: int, device: torch.device) -> Any:
    """Rank `src`'s picklable object on every rank.

    The pickled bytes travel as int32 words in two collectives, the length first, so that every
    rank allocates the source's size whatever it would have pickled itself. XLA tensors inside
    the object arrive on each receiver's own device.
    """
    is_source = xr.global_ordinal() == src
    torch_xla.sync()  # the source's tensors are copied to the host while pickling
    data = dumps_for_ranks(obj) if is_source else b""
    if len(data) > _MAX_BROADCAST_BYTES:
        raise ValueError(
            f"broadcast(src={src}): the object pickles to {len(data)} bytes, over the "
            f"{_MAX_BROADCAST_BYTES}-byte limit; save it to a file and broadcast the path"
        )
    length = torch.tensor([len(data)], dtype=torch.int32, device=device)
    xm.collective_broadcast([length], root_ordinal=src)
    size = int(length.item())
    words = -(-size // 4)
    if is_source:
        padded = bytearray(data) + bytes(words * 4 - size)
        buffer = torch.frombuffer(padded, dtype=torch.int32).to(device)
    else:
        buffer = torch.zeros(words, dtype=torch.int32, device=device)
    xm.collective_broadcast([buffer], root_ordinal=src)
    if is_source:
        return obj
    return pickle.loads(buffer.cpu().numpy().tobytes()[:size])
