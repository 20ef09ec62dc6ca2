"""What xlasim says when ranks hang or can never meet: where every rank is, grouped by call.

On a TPU such a program hangs with no word; here the rendezvous (`rendezvous.Run`) notices it
and raises `DeadlockError`, `CollectiveMismatchError` or, past a bound, `CollectiveTimeoutError`
(the world's supervisor, `world.World`, and a dead worker process, `processes`, use the same
report). Ranks waiting in the same call are listed together, so a 64-core report stays short;
a rank that never arrived is shown with its Python stack, wherever it lives (`RankReporter`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class WaitingCall(Protocol):
    """The call a rank waits in (`xlasim.emulation.rendezvous.Call`, a layer above)."""

    def describe(self) -> str: ...


class RankReporter(Protocol):
    """Where a rank is right now, for hang reports (ranks may live in other processes)."""

    def location(self, rank: int) -> str: ...

    def stack(self, rank: int) -> str: ...


def describe_ranks(
    running: list[int],
    waiting: dict[int, WaitingCall],
    finished: list[int],
    reporter: RankReporter | None,
) -> str:
    """Where every rank is, with Python stacks: the body of hang reports.

    Ranks that are not in a wait come first, each with its stack; ranks waiting in the same
    call are listed together with the stack of the first of them.

    Args:
        running: the ranks that never reached the wait (still running their function).
        waiting: the ranks in a wait, each with the call it waits in.
        finished: the ranks that returned from their function.
        reporter: tells where a rank is and its stack; None: locations are unknown and no
            stacks are shown.
    """
    parts = []
    for rank in running:
        where = reporter.location(rank) if reporter else "an unknown line"
        parts.append(f"--- rank {rank} never arrived; it is running at {where}")
        if reporter:
            parts.append(reporter.stack(rank).rstrip())
    for description, ranks in by_description(waiting).items():
        parts.append(
            f"--- {rank_span(ranks)} wait{'s' if len(ranks) == 1 else ''} in {description}"
        )
        if reporter:
            parts.append(reporter.stack(ranks[0]).rstrip())
    if finished:
        parts.append(f"--- {rank_span(finished)} returned from the function")
    return "\n".join(parts)


def where_ranks_wait(
    waiting: dict[int, WaitingCall], running: list[int], finished: list[int]
) -> str:
    """The lines of a deadlock or mismatch report: every rank, waiting ones grouped by call.

    Args:
        waiting: the ranks in a wait, each with the call it waits in.
        running: the ranks that had not reached a collective.
        finished: the ranks that returned from their function.
    """
    lines = "\n".join(
        f"  {rank_span(ranks)} wait{'s' if len(ranks) == 1 else ''} in {description}"
        for description, ranks in by_description(waiting).items()
    )
    if running:
        lines += f"\n  {rank_span(running)} had not reached a collective yet"
    if finished:
        lines += f"\n  {rank_span(finished)} returned from the function"
    return lines


def by_description(calls: dict[int, WaitingCall]) -> dict[str, list[int]]:
    """The ranks of each distinct call, in rank order."""
    grouped: dict[str, list[int]] = {}
    for rank in sorted(calls):
        grouped.setdefault(calls[rank].describe(), []).append(rank)
    return grouped


def rank_span(ranks: Sequence[int]) -> str:
    """`rank 3` or `ranks 0-5, 7`: compact enough for 64-core reports."""
    spans: list[str] = []
    start = previous = ranks[0]
    for rank in [*ranks[1:], None]:
        if rank is not None and rank == previous + 1:
            previous = rank
            continue
        spans.append(str(start) if start == previous else f"{start}-{previous}")
        if rank is not None:
            start = previous = rank
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(spans)}"
