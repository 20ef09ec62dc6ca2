"""xm.xla_rendezvous: every rank's payload, in ordinal order (xm.rendezvous is beside it)."""

from __future__ import annotations

import torch_xla

from ...base import rank_context
from ._arguments import described_call
from ._record import CollectiveRecord


def xla_rendezvous(
    payload: bytes = b"", ordinals: list[int] | None = None, tag: str | None = None
) -> list[bytes]:
    """xm.xla_rendezvous: every rank's payload, in ordinal order. As in torch_xla 2.9, only a
    rendezvous of the whole world is supported (`ordinals`, if given, must name every rank).

    Args:
        payload: this rank's bytes.
        ordinals: the ranks that meet; torch_xla 2.9 supports only all of them.
        tag: a name the ranks must agree on (xm.rendezvous').
    """
    ctx = rank_context.require("xm.rendezvous")
    if ordinals and len(ordinals) != ctx.world_size:
        raise ValueError("Only global rendezvous is supported")
    if not isinstance(payload, bytes):
        raise TypeError(f"`payload` must be bytes, not {type(payload)}")
    members = tuple(range(ctx.world_size))
    torch_xla.sync()
    described = described_call("rendezvous", tag=tag, replicas=members)
    payloads = list(ctx.run.gather(ctx.rank, members, described, payload))
    # torch_xla's rendezvous cuts the graph twice more (after gathering the sizes, and after the
    # payloads unless all are empty); every cut advances the device's random stream, so the
    # emulation cuts where it does (docs/fidelity.md, "Random streams").
    torch_xla.sync()
    if any(payloads):
        torch_xla.sync()
    return payloads


RECORD = CollectiveRecord("xla_rendezvous", eager=xla_rendezvous, combine=None)
