"""Running a launch, a test or a script under N seeded schedules, stopping at the first that
fails and naming its seed (docs/races.md, "Schedules")."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .settings import scheduled

if TYPE_CHECKING:
    from ..reports.rank_outcome import RankOutcome

#: The seeds N schedules explore (0 is no schedule at all; `--schedule 0` is a plain run).
FIRST_SEED = 1


def seeds(count: int) -> range:
    """The seeds of `count` schedules.

    Args:
        count: how many schedules.
    """
    return range(FIRST_SEED, FIRST_SEED + count)


def replay_note(seed: int, how: str) -> str:
    return f"xlasim: this failed under schedule {seed}; replay exactly that schedule with {how}"


def explore(
    run: Callable[[], Sequence[RankOutcome]], count: int, replay: Callable[[int], str]
) -> tuple[Sequence[RankOutcome], int | None]:
    """Run `run` under `count` schedules; the outcomes of the first that fails (its errors
    name the seed) and its seed, else the last outcomes and None.

    Args:
        run: one launch (or test body on every rank), returning the ranks' outcomes.
        count: how many schedules.
        replay: the option that replays a seed (`--xla-schedule=S`), for the note.
    """
    outcomes: Sequence[RankOutcome] = ()
    for seed in seeds(count):
        note = replay_note(seed, replay(seed))
        with scheduled(seed):
            try:
                outcomes = run()
            except BaseException as error:
                error.add_note(note)
                raise
        failing = [o for o in outcomes if o.raised]
        if failing:
            for outcome in failing:
                outcome.error.add_note(note)  # type: ignore[union-attr]
                outcome.traceback += note + "\n"
            return outcomes, seed
    return outcomes, None


def explore_script(argv: Sequence[str], count: int) -> int:
    """`xlasim run ARGV` under `count` schedules, each in a fresh process (a script is run once
    per process); the exit status of the first that fails, else 0.

    Args:
        argv: the `xlasim run` arguments without `--schedules`.
        count: how many schedules.
    """
    for seed in seeds(count):
        command = [sys.executable, "-m", "xlasim", "run", "--schedule", str(seed), *argv]
        status = subprocess.call(command)
        if status != 0:
            replay = " ".join(["xlasim run --schedule", str(seed), *argv])
            print(
                f"xlasim: schedule {seed} of {count} failed (exit status {status})", file=sys.stderr
            )
            print(replay_note(seed, f"`{replay}`"), file=sys.stderr)
            return status
        print(f"xlasim: schedule {seed} of {count} passed", file=sys.stderr)
    return 0
