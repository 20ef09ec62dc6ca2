"""The race report: one section per pair of lines that race, in the hang report's per-rank
style (each rank, what it did, where)."""

from __future__ import annotations

from collections.abc import Sequence

from ..base.errors import XlasimError
from ..reports.hang_report import rank_span
from .accesses import Race


class RaceError(XlasimError):
    """Ranks touched one path with no collective ordering them (raised after the launch, even
    when every rank returned: on a TPU the other order may come)."""

    def __init__(self, message: str, races: Sequence[Race] = ()):
        super().__init__(message)
        self.races = list(races)


class RaceRecordingError(RaceError):
    """Detection could not record some accesses, so it could miss a race: the launch fails,
    naming each rank, operation and cause, rather than pass unchecked."""


def describe_unrecorded(unrecorded: dict[int, list[str]]) -> str:
    """The accesses detection could not record, by rank.

    Args:
        unrecorded: by rank, each access it could not record (a sentence).
    """
    lines = []
    for rank, sentences in sorted(unrecorded.items()):
        lines += [f"  rank {rank}: {sentence}" for sentence in sentences[:UNRECORDED_SHOWN]]
        if len(sentences) > UNRECORDED_SHOWN:
            lines.append(f"  rank {rank}: and {len(sentences) - UNRECORDED_SHOWN} more")
    return (
        "race detection could not record accesses of the ranks, so it could miss races between "
        "them (please report it with these lines):\n" + "\n".join(lines)
    )


#: Unrecorded accesses a rank's section shows (the rest are counted).
UNRECORDED_SHOWN = 5


def describe(races: Sequence[Race]) -> str:
    """Every race, grouped by the two lines and operations (one section names all the rank
    pairs that raced there).

    Args:
        races: the races found, in a stable order.
    """
    groups: dict[tuple, list[Race]] = {}
    for race in races:
        groups.setdefault(race.signature(), []).append(race)
    sections = []
    for number, same in enumerate(groups.values(), 1):
        race = same[0]
        width = max(len(a.op) for a in (race.first, race.second))
        lines = [f"race {number}: {_paths(race)} (no collective orders these accesses)"]
        for access in (race.first, race.second):
            lines.append(
                f"  {access.who}: {access.op:<{width}} {access.path}\n      at {access.site}"
            )
        if len(same) > 1:
            firsts = rank_span(sorted({r.first.rank for r in same}))
            seconds = rank_span(sorted({r.second.rank for r in same}))
            lines.append(
                f"  the same lines race between {firsts} and {seconds} ({len(same)} pairs)"
            )
        sections.append("\n".join(lines))
    return (
        f"{len(races)} race(s) between ranks at {len(groups)} pair(s) of lines: accesses of one "
        "path, at least one a change, that no collective orders (on a TPU either may come "
        "first; add a collective such as xm.rendezvous between them):\n" + "\n".join(sections)
    )


def _paths(race: Race) -> str:
    first, second = race.first.path, race.second.path
    return first if first == second else f"{first} and {second}"
