"""Races between ranks: detection, seeded schedules and their replay (docs/races.md).

- detection (`XLASIM_RACES=1`, `xlasim run --races`, `pytest --xla-races`): every rank's file
  accesses (`watch`) are placed on vector clocks computed from the collectives that
  synchronised the ranks (`syncs`, `clocks`); conflicting accesses no collective orders
  (`accesses`) fail the launch with a `RaceError` (`report`), even when every rank returned.
- schedules (`XLASIM_SCHEDULE=SEED`, `--schedule SEED`): each rank is delayed at file
  operations and collective exits as the seed says (`schedule`); `explore` runs N of them.

Off by default, and then nothing is recorded, installed or delayed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .accesses import Access, Race, races
from .clocks import clocks
from .hosts import explain_missing_files
from .report import RaceError, describe
from .settings import RACES_ENV, SCHEDULE_ENV, detecting, requested, scheduled
from .syncs import SyncLog

if TYPE_CHECKING:
    from ..reports.rank_outcome import RankOutcome
    from ..traces.session import TraceFiles


def found(syncs: SyncLog, outcomes: Sequence[RankOutcome]) -> list[Race]:
    """The races of one launch.

    Args:
        syncs: the launch's synchronisations, per rank.
        outcomes: the ranks' outcomes, with their accesses.
    """
    accesses: list[Access] = [a for o in outcomes for a in (o.accesses or ())]
    return races(accesses, clocks(syncs.syncs))


def check(
    syncs: SyncLog | None,
    outcomes: Sequence[RankOutcome],
    rank_failure: Callable[[Sequence[RankOutcome]], BaseException],
    aborted: BaseException | None = None,
    trace: TraceFiles | None = None,
) -> None:
    """Raise a `RaceError` naming every race of the launch, if any; what the launch raises
    otherwise becomes its cause. A rank that found no file another host wrote gets a note.

    Args:
        syncs: the launch's synchronisations (None: detection was off).
        outcomes: the ranks' outcomes.
        rank_failure: the error of a launch whose ranks raised, made from their outcomes.
        aborted: what aborted the launch, if anything did.
        trace: the launch's trace files, when it was traced (the report names them).
    """
    if syncs is None:
        return
    explain_missing_files(outcomes)
    seen = found(syncs, outcomes)
    if not seen:
        return
    message = describe(seen)
    if trace is not None:
        message += "\n" + trace.describe()
    failure = aborted or (rank_failure(outcomes) if any(o.raised for o in outcomes) else None)
    if failure is not None:
        message += f"\n(the launch also failed: {type(failure).__name__}: {failure})"
    raise RaceError(message, seen) from failure


__all__ = [
    "RACES_ENV",
    "SCHEDULE_ENV",
    "RaceError",
    "check",
    "detecting",
    "requested",
    "scheduled",
]
