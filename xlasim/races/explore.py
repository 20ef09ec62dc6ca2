"""Running a launch, a test or a script under N schedules, stopping at the first that fails and
naming its seed, and counting the distinct interleavings they took (docs/races.md,
"Schedules")."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import interleavings
from .launch_requests import schedule_directory, schedule_name, scheduled

if TYPE_CHECKING:
    from ..reports.rank_outcome import RankOutcome

#: The seeds N schedules explore (0 is a schedule like any other; exploration starts at 1).
FIRST_SEED = 1


def seeds(count: int) -> range:
    """The seeds of `count` schedules.

    Args:
        count: how many schedules.
    """
    return range(FIRST_SEED, FIRST_SEED + count)


def replay_note(seed: int, how: str) -> str:
    """The line a failure's report ends with, so its user can rerun the schedule that failed.

    Args:
        seed: the failing schedule's seed.
        how: what replays it where the failure was seen (`--xla-schedule=7`, a variable).
    """
    return f"xlasim: this failed under schedule {seed}; replay exactly that schedule with {how}"


@dataclass
class Coverage:
    """What schedules explored: how many ran, and the distinct interleavings they took (a
    schedule's interleaving: the decisions of every launch it made, in order)."""

    schedules: int = 0
    taken: set[tuple[str, ...]] = field(default_factory=set)

    @property
    def distinct(self) -> int:
        return len(self.taken)

    def add(self, other: Coverage) -> None:
        self.schedules += other.schedules
        self.taken |= other.taken

    def describe(self) -> str:
        return (
            f"{self.schedules} schedule(s) took {self.distinct} distinct interleaving(s) "
            "(docs/races.md)"
        )


def _count(taken: list[tuple[str, ...]]) -> Coverage:
    return Coverage(len(taken), set(taken))


def explore(
    run: Callable[[], Sequence[RankOutcome]], count: int, replay: Callable[[int], str]
) -> tuple[Sequence[RankOutcome], int | None, Coverage]:
    """Run `run` under `count` schedules; the outcomes of the first that fails (its errors
    name the seed) and its seed, else the last outcomes and None; and what they covered.

    Args:
        run: one launch (or test body on every rank), returning the ranks' outcomes.
        count: how many schedules.
        replay: the option that replays a seed (`--xla-schedule=S`), for the note.
    """
    outcomes: Sequence[RankOutcome] = ()
    taken: list[tuple[str, ...]] = []
    for seed in seeds(count):
        note = replay_note(seed, replay(seed))
        first = len(interleavings.taken)
        with scheduled(seed):
            try:
                outcomes = run()
            except BaseException as error:
                error.add_note(note)
                raise
            finally:
                taken.append(tuple(i.digest() for i in interleavings.taken[first:]))
        failing = [o for o in outcomes if o.raised]
        if failing:
            for outcome in failing:
                outcome.error.add_note(note)  # type: ignore[union-attr]
                outcome.traceback += note + "\n"
            return outcomes, seed, _count(taken)
    return outcomes, None, _count(taken)


def explore_script(argv: Sequence[str], count: int) -> int:
    """`xlasim run ARGV` under `count` schedules, each in a fresh process (a script is run once
    per process); the exit status of the first that fails, else 0.

    Args:
        argv: the `xlasim run` arguments without `--schedules`.
        count: how many schedules.
    """
    taken: list[tuple[str, ...]] = []
    status = 0
    for seed in seeds(count):
        command = [sys.executable, "-m", "xlasim", "run", "--schedule", str(seed), *argv]
        status = subprocess.call(command)
        taken.append(_launches_of(seed))
        if status != 0:
            replay = " ".join(["xlasim run --schedule", str(seed), *argv])
            print(
                f"xlasim: schedule {seed} of {count} failed (exit status {status})", file=sys.stderr
            )
            print(replay_note(seed, f"`{replay}`"), file=sys.stderr)
            break
        print(f"xlasim: schedule {seed} of {count} passed", file=sys.stderr)
    print(f"xlasim: {_count(taken).describe()}", file=sys.stderr)
    return status


def _launches_of(seed: int) -> tuple[str, ...]:
    """The digests of the launches a child recorded under `seed` (none when it made none)."""
    path = interleavings.file_of(schedule_directory(), schedule_name(), seed)
    if not path.exists():
        return ()
    recorded = interleavings.read(path)
    return tuple(interleavings.digest(keys) for keys in recorded)
