"""Races between ranks: detection, seeded schedules and their replay (docs/races.md).

- detection (`XLASIM_RACES=1`, `xlasim run --races`, `pytest --xla-races`): every rank's file
  accesses (`watch`) are placed on vector clocks computed from the collectives that
  synchronised the ranks (`syncs`, `clocks`); conflicting accesses no collective orders
  (`accesses`) fail the launch with a `RaceError` (`race_report`), even when every rank returned.
- schedules (`XLASIM_SCHEDULE=SEED`, `--schedule SEED`): ranks take turns, and at every
  scheduling point (start, file operation, collective entry and exit, send, receive, sleep) the
  seed's PCT policy (`pct`) decides who runs next (`scheduler`); each launch's decisions are
  written and compared with the recorded ones (`interleavings`); `explore` runs N seeds.

Off by default, and then nothing is recorded, installed or scheduled.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .accesses import Access, Race, races
from .clocks import clocks
from .hosts import explain_missing_files
from .interleavings import Interleaving, record
from .launch_requests import (
    RACES_ENV,
    SCHEDULE_ENV,
    SCHEDULE_NAME_ENV,
    detecting,
    requested,
    schedule_directory,
    schedule_name,
    scheduled,
)
from .race_report import RaceError, RaceRecordingError, describe, describe_unrecorded
from .scheduler import Scheduler
from .syncs import SyncLog

if TYPE_CHECKING:
    from ..reports.rank_outcome import RankOutcome
    from ..trace_files.session import TraceFiles


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
    unrecorded = {o.rank: o.unrecorded for o in outcomes if o.unrecorded}
    seen = found(syncs, outcomes)
    if not seen and not unrecorded:
        return
    message = describe(seen) if seen else describe_unrecorded(unrecorded)
    if trace is not None:
        message += "\n" + trace.describe()
    failure = aborted or (rank_failure(outcomes) if any(o.raised for o in outcomes) else None)
    if failure is not None:
        message += f"\n(the launch also failed: {type(failure).__name__}: {failure})"
    if unrecorded and seen:
        message += "\n" + describe_unrecorded(unrecorded)
    raise (RaceRecordingError if unrecorded else RaceError)(message, seen) from failure


def refused_on_a_pod(asked: str) -> str:
    """Why a schedule is refused on a pod of several machines.

    Args:
        asked: the option refused.
    """
    return (
        f"{asked} is refused on a pod of several machines (--machines): a schedule gives one "
        "rank the turn at a time, and the machines have no scheduler in common; explore the "
        "program on one machine with the same topology (xlasim run --topology ... --schedules "
        "N), where every host's ranks take turns (--races works on a pod; docs/races.md, "
        '"Pods")'
    )


def recorded(scheduler: Scheduler | None) -> Interleaving | None:
    """The interleaving a launch took under its schedule, written to its file and compared
    with the one recorded there before (None: the launch followed no schedule).

    Args:
        scheduler: the launch's scheduler.
    """
    if scheduler is None:
        return None
    interleaving = Interleaving(scheduler.seed, list(scheduler.decisions))
    record(interleaving, schedule_directory(), schedule_name())
    return interleaving


def note_interleaving(
    interleaving: Interleaving | None,
    outcomes: Sequence[RankOutcome],
    aborted: BaseException | None,
) -> None:
    """Say on a failed launch's errors where its interleaving is and whether it is the
    recorded one; on a passed launch, only when it is not.

    Args:
        interleaving: the launch's interleaving (None: no schedule).
        outcomes: the ranks' outcomes (None for ranks of an aborted launch).
        aborted: what aborted the launch, if anything did.
    """
    if interleaving is None:
        return
    note = f"xlasim: schedule {interleaving.seed}: {interleaving.comparison()}"
    failing = [o for o in outcomes if o is not None and o.raised]
    for outcome in failing:
        outcome.error.add_note(note)  # type: ignore[union-attr]
        outcome.traceback += note + "\n"
    if aborted is not None and all(aborted is not o.error for o in failing):
        aborted.add_note(note)
    if not failing and aborted is None and interleaving.matches_recording() is False:
        print(note, file=sys.stderr)


__all__ = [
    "RACES_ENV",
    "SCHEDULE_ENV",
    "SCHEDULE_NAME_ENV",
    "Interleaving",
    "RaceError",
    "RaceRecordingError",
    "check",
    "detecting",
    "note_interleaving",
    "recorded",
    "refused_on_a_pod",
    "requested",
    "scheduled",
]
