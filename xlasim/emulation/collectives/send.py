"""xm.send: post a tensor on a channel, for the rank that receives on it (`recv.py`)."""

from __future__ import annotations

import torch

from ...base import rank_context
from ..transfer import to_host
from ._arguments import describe_tensors, described_call, require_xla
from ._record import CollectiveRecord


def send(value: torch.Tensor, channel_id: int) -> torch.Tensor:
    """xm.send: post the value on a channel; returns the input, as torch_xla does.

    Args:
        value: the tensor sent.
        channel_id: the channel, matched with a `recv` of the same id.
    """
    ctx = rank_context.require("xm.send")
    require_xla([value], "xm.send")
    described = described_call("send", channel_id=channel_id, tensors=describe_tensors([value]))
    ctx.run.send(ctx.rank, ("xm", channel_id), described, to_host([value])[0])
    return value


RECORD = CollectiveRecord("send", eager=send, combine=None, xlac=("_xla_send",))
