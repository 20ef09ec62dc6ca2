"""Vector clocks of one launch, computed after it from what synchronised its ranks.

A rank's file accesses are ordered with another rank's only through the collectives between
them: a collective orders every member of its group (each leaves it knowing what every member
did before entering), a send/recv pair orders the sender's past before the receiver's future,
and the launch and its end order everyone (so one launch is analysed alone, from zero clocks).

The clocks are computed after the run, from each rank's sequence of synchronisations as the
rendezvous saw them (`Sync`), not maintained while it runs: ranks in worker processes would
otherwise carry clocks through every collective, and a run without detection pays nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

#: One vector clock: entry r counts the synchronisations of rank r known here.
Clock = tuple[int, ...]

GROUP, SEND, RECEIVE = "group", "send", "receive"


@dataclass(frozen=True)
class Sync:
    """One synchronisation of one rank, as the rendezvous saw it.

    `kind` is GROUP (a collective; `key` is shared by every member of that meeting, `members`
    lists them), SEND or RECEIVE (`key` names one message: the receive with the key of a send
    took that message).
    """

    kind: str
    key: Hashable
    members: tuple[int, ...] = ()


def clocks(syncs: Sequence[Sequence[Sync]]) -> list[list[Clock]]:
    """Every rank's clock after each of its synchronisations.

    Args:
        syncs: per rank, its synchronisations in the order it made them.

    Returns:
        per rank r, `result[r][k]` is r's clock after its first k synchronisations (`k = 0`:
        the launch, all zeros). A synchronisation that never completed (a run aborted in it)
        ends the rank's list there: nothing the rank did can come after it.
    """
    size = len(syncs)
    current = [[0] * size for _ in range(size)]
    result: list[list[Clock]] = [[tuple(c)] for c in current]
    cursor = [0] * size
    sent: dict[Hashable, list[int]] = {}
    progressed = True
    while progressed:
        progressed = False
        for rank in range(size):
            while cursor[rank] < len(syncs[rank]):
                sync = syncs[rank][cursor[rank]]
                if sync.kind == SEND:
                    current[rank][rank] += 1
                    sent[sync.key] = list(current[rank])
                    _advance(rank, current, cursor, result)
                elif sync.kind == RECEIVE:
                    if sync.key not in sent:
                        break
                    current[rank][rank] += 1
                    current[rank] = _join(current[rank], sent[sync.key])
                    _advance(rank, current, cursor, result)
                elif _all_arrived(sync, syncs, cursor):
                    for member in sync.members:
                        current[member][member] += 1
                    joined = [0] * size
                    for member in sync.members:
                        joined = _join(joined, current[member])
                    for member in sync.members:
                        current[member] = list(joined)
                        _advance(member, current, cursor, result)
                else:
                    break
                progressed = True
    return result


def _advance(rank: int, current: list[list[int]], cursor: list[int], result: list) -> None:
    cursor[rank] += 1
    result[rank].append(tuple(current[rank]))


def _join(left: Sequence[int], right: Sequence[int]) -> list[int]:
    return [max(a, b) for a, b in zip(left, right, strict=True)]


def _all_arrived(sync: Sync, syncs: Sequence[Sequence[Sync]], cursor: list[int]) -> bool:
    return all(
        cursor[m] < len(syncs[m]) and syncs[m][cursor[m]].key == sync.key for m in sync.members
    )


def happened_before(rank: int, earlier: Clock, later: Clock) -> bool:
    """Whether what `rank` did at clock `earlier` is known to another rank at clock `later`:
    a synchronisation of `rank` after it reached that rank (every synchronisation ticks the
    rank's own entry first, so `later` saw a tick past `earlier`'s).

    Args:
        rank: the rank that made the earlier access.
        earlier: that rank's clock at the access.
        later: the other rank's clock at its access.
    """
    return later[rank] > earlier[rank]
