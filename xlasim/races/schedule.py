"""Seeded schedules: where each rank is held back, so an order a TPU may take is taken here.

Design (docs/races.md): a schedule is a seed. The seed draws a priority for every rank (a
permutation); before its first file operation after each synchronisation a rank sleeps
`FILE_STEP_S * (1 + priority)`, and when it leaves a collective it sleeps
`COLLECTIVE_STEP_S * (1 + priority)` at the points the seed picks (one in `COLLECTIVE_ODDS`).
Ranks that leave a collective together start touching files in the order of the drawn
priorities, a whole step apart: far more than the jitter of threads and processes on a loaded
machine, which is why the same seed gives the same order again (replay) and why no scheduler
process has to grant turns (ranks live in several processes; a turn would cost a round trip
per file operation). Only the first operation of each stretch between synchronisations is
delayed: delaying every one would add up to ties (two short delays equal to one long one) that
the jitter breaks either way.

Decisions depend only on the seed, the rank, the kind of point and how many such points the
rank passed: the same program under the same seed is delayed at the same places.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

FILE_STEP_S = 0.1
COLLECTIVE_STEP_S = 0.002
COLLECTIVE_ODDS = 4
#: How often a delay looks whether its launch was aborted.
ABORT_CHECK_S = 0.01


class Schedule:
    """One rank's delays under one seed.

    Args:
        seed: the schedule (a failure names it; `--schedule SEED` replays it).
        rank: the rank delayed.
        size: ranks in the launch.
        aborted: whether the launch was aborted: a delay ends at once then, so the ranks the
            abort released unwind within the supervisor's grace period.
    """

    def __init__(self, seed: int, rank: int, size: int, aborted: Callable[[], bool]):
        self.seed = seed
        self._aborted = aborted
        self.rank = rank
        self.priority = random.Random(seed).sample(range(size), size)[rank]
        self._collectives_passed = 0
        self._delayed_at = -1

    def before_file_operation(self, position: int) -> None:
        """Args: position: the synchronisations the rank made so far."""
        if position != self._delayed_at:
            self._delayed_at = position
            self._sleep(FILE_STEP_S * (1 + self.priority))

    def after_collective(self) -> None:
        index = self._collectives_passed
        self._collectives_passed += 1
        draw = random.Random(f"{self.seed}:{self.rank}:{index}").randrange(COLLECTIVE_ODDS)
        if draw == 0:
            self._sleep(COLLECTIVE_STEP_S * (1 + self.priority))

    def _sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._aborted():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(left, ABORT_CHECK_S))
