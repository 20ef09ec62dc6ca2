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

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .accesses import Access, Race, races
from .clocks import clocks
from .report import RaceError, describe
from .syncs import SyncLog

if TYPE_CHECKING:
    from ..reports.rank_outcome import Collect, RankOutcome

RACES_ENV = "XLASIM_RACES"
SCHEDULE_ENV = "XLASIM_SCHEDULE"


def requested(collect: Collect) -> Collect:
    """`collect` with what this process's environment asks of launches (detection, a
    schedule); the pytest plugin and `xlasim run` set the variables.

    Args:
        collect: what the launch collects otherwise.
    """
    detect = os.environ.get(RACES_ENV, "") not in ("", "0")
    seed = os.environ.get(SCHEDULE_ENV, "")
    if not detect and not seed:
        return collect
    return dataclasses.replace(collect, races=detect, schedule=int(seed) if seed else None)


def found(syncs: SyncLog, outcomes: Sequence[RankOutcome]) -> list[Race]:
    """The races of one launch.

    Args:
        syncs: the launch's synchronisations, per rank.
        outcomes: the ranks' outcomes, with their accesses.
    """
    accesses: list[Access] = [a for o in outcomes for a in (o.accesses or ())]
    return races(accesses, clocks(syncs.syncs))


def check(
    syncs: SyncLog | None, outcomes: Sequence[RankOutcome], failure: BaseException | None
) -> None:
    """Raise a `RaceError` naming every race of the launch, if any (`failure`, the ranks' own
    error when they raised, becomes its cause).

    Args:
        syncs: the launch's synchronisations (None: detection was off).
        outcomes: the ranks' outcomes.
        failure: what the launch raises otherwise, or None.
    """
    if syncs is None:
        return
    seen = found(syncs, outcomes)
    if not seen:
        return
    message = describe(seen)
    if failure is not None:
        message += f"\n(the launch also failed: {type(failure).__name__}: {failure})"
    raise RaceError(message, seen) from failure


__all__ = ["RACES_ENV", "SCHEDULE_ENV", "RaceError", "check", "requested"]
