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
        """`rank` entered the `sequence`-th collective of `members`.

        Args:
            rank: the rank entering, global in the launch.
            members: the ranks of the collective's group (its participants).
            sequence: how many collectives of that group `rank` entered before this one (from 0).
        """
        self.syncs[rank].append(Sync(GROUP, (members, sequence), members))

    def send(self, rank: int, channel: Hashable) -> None:
        """`rank` posted the next message of `channel`.

        Args:
            rank: the sending rank.
            channel: the mailbox's key (`("xm", channel_id)` for `xm.send`).
        """
        self.syncs[rank].append(Sync(SEND, (channel, self._sent[channel])))
        self._sent[channel] += 1

    def receive(self, rank: int, channel: Hashable) -> None:
        """`rank` took the oldest message of `channel` (messages are taken in posting order).

        Args:
            rank: the receiving rank.
            channel: the mailbox's key, as given to `send`.
        """
        self.syncs[rank].append(Sync(RECEIVE, (channel, self._received[channel])))
        self._received[channel] += 1
