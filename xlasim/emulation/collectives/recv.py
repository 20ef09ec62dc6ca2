"""xm.recv: take the oldest tensor a rank posted on a channel (`send.py`)."""

from __future__ import annotations

import torch

from ...base import rank_context
from ..rendezvous import Call
from ..transfer import to_device
from ._arguments import describe_tensors, described_call, require_xla
from ._delivery import copy_into
from ._record import CollectiveRecord


def recv(output: torch.Tensor, channel_id: int) -> torch.Tensor:
    """xm.recv: take the oldest value posted on a channel into `output`.

    Args:
        output: the buffer written, of the sent tensor's shape and dtype.
        channel_id: the channel, matched with a `send` of the same id.
    """
    ctx = rank_context.require("xm.recv")
    require_xla([output], "xm.recv")
    described = described_call("recv", channel_id=channel_id, tensors=describe_tensors([output]))
    sent_by, value = ctx.run.receive(ctx.rank, ("xm", channel_id), described)
    check_received(value, output, sent_by, described)
    copy_into([output], to_device([value.clone()], output.device))  # never alias the sender
    return output


def check_received(
    value: torch.Tensor, output: torch.Tensor, sent_by: Call, received_by: Call
) -> None:
    """A receive buffer must have the shape and dtype of what was sent.

    Args:
        value: what was sent.
        output: the receiver's buffer.
        sent_by: the sender's call, named in the error.
        received_by: the receiver's call, named in the error.
    """
    if value.shape != output.shape or value.dtype != output.dtype:
        raise ValueError(
            f"recv buffer {describe_tensors([output])} does not match the tensor sent "
            f"{describe_tensors([value])}: sent by {sent_by.describe()}, "
            f"received by {received_by.describe()}"
        )


RECORD = CollectiveRecord("recv", eager=recv, combine=None, xlac=("_xla_recv",))
