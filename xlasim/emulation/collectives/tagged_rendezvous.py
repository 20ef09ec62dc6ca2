"""xm.rendezvous: xm.xla_rendezvous under a tag the ranks must agree on."""

from __future__ import annotations

from ._record import CollectiveRecord
from .xla_rendezvous import xla_rendezvous


def rendezvous(tag: str, payload: bytes = b"", replicas: list[int] = []) -> list[bytes]:  # noqa: B006
    """xm.rendezvous: wait for every replica at `tag` and return all their payloads.

    Args:
        tag: the meeting's name; every rank must give the same.
        payload: this rank's bytes.
        replicas: the ranks that meet (empty: all; torch_xla 2.9 supports only all).
    """
    return xla_rendezvous(payload, replicas or None, tag=tag)


RECORD = CollectiveRecord("rendezvous", eager=rendezvous, combine=None)
