"""Each rank's synchronisations in one launch, written by the rendezvous as it serves them.

The rendezvous (`Run`) lives in the launching process in both modes, so it sees every
collective, send and receive of every rank in the order each rank made them; it keeps them
here only when the launch detects races (`Collect.races`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

from .clocks import GROUP, RECEIVE, SEND, Sync


class SyncLog:
    """Per rank, its synchronisations in order (the rendezvous's lock is held on every call).

    Args:
        size: ranks in the launch.
    """

    def __init__(self, size: int):
        self.syncs: list[list[Sync]] = [[] for _ in range(size)]
        self._sent: Counter[Hashable] = Counter()
        self._received: Counter[Hashable] = Counter()

    def group(self, rank: int, members: tuple[int, ...], sequence: int) -> None:
        """`rank` entered the `sequence`-th collective of `members`."""
        self.syncs[rank].append(Sync(GROUP, (members, sequence), members))

    def send(self, rank: int, channel: Hashable) -> None:
        """`rank` posted the next message of `channel`."""
        self.syncs[rank].append(Sync(SEND, (channel, self._sent[channel])))
        self._sent[channel] += 1

    def receive(self, rank: int, channel: Hashable) -> None:
        """`rank` took the oldest message of `channel` (messages are taken in posting order)."""
        self.syncs[rank].append(Sync(RECEIVE, (channel, self._received[channel])))
        self._received[channel] += 1
