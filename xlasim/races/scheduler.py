"""The order of one launch under a schedule: one rank runs at a time, and at every scheduling
point the scheduler decides which rank runs next (docs/races.md, "Schedules").

A rank's scheduling points are its start, each file operation the detector sees (before it is
made), each collective's entry and exit, each send and receive, and each `time.sleep`. A rank
is RUNNING (it holds the turn, or has not reached its first point yet), PARKED at a point
(it may run when chosen), BLOCKED in the rendezvous (a collective whose other members have not
all arrived, a receive with no message: the rendezvous enables it again), or DONE. A decision
is made when no rank runs, among the parked ones, by the seed's policy (`pct.Pct`): the
set of parked ranks at each decision follows from the decisions before it, never from timing,
so a seed decides the whole interleaving, whatever the machine's load.

The scheduler is state only; its owner (the rendezvous' `Run`) holds the lock around every
call and waits on its condition for `runs(rank)`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..base import debugger_clock
from .interleavings import Decision
from .pct import DEFAULT_DEPTH, Pct

RUNNING, PARKED, BLOCKED, DONE = "running", "parked", "blocked", "done"
START = "start"


class Scheduler:
    """The turn of the ranks of one launch.

    Args:
        seed: the schedule.
        ranks: the launch's ranks (each runs to its first point when the launch starts).
        notify: wakes every waiting rank (the owner's condition's `notify_all`).
        depth: PCT's depth.
    """

    def __init__(
        self,
        seed: int,
        ranks: Sequence[int],
        notify: Callable[[], None],
        depth: int = DEFAULT_DEPTH,
    ):
        self.seed = seed
        self.policy = Pct(seed, ranks, depth)
        self.states = dict.fromkeys(ranks, RUNNING)
        #: What each parked rank does when it runs next: (point, detail).
        self.next: dict[int, tuple[str, str]] = {}
        #: The interleaving so far: every decision, in order.
        self.decisions: list[Decision] = []
        #: When the last decision was made or a rank reached a point (`debugger_clock.now`, which
        #: stands still while a rank is in a debugger): waits are bounded from there, as ranks
        #: that take turns are not stuck.
        self.progress = debugger_clock.now()
        #: What a blocked rank waits for (a channel), so a send enables its receivers.
        self._waiting_on: dict[int, object] = {}
        self._notify = notify
        self.stopped = False

    def runs(self, rank: int) -> bool:
        """Whether `rank` may run now (its turn, or the launch was aborted: no more turns)."""
        return self.stopped or self.states[rank] == RUNNING

    def park(self, rank: int, point: str, detail: str = "") -> None:
        """`rank` reached a point: it waits there until chosen.

        Args:
            rank: the rank.
            point: what it does next (`write at prog.py:12 in f`), compared by replays.
            detail: what else people want to read (a path), not compared.
        """
        self.states[rank] = PARKED
        self.next[rank] = (point, detail)
        self._decide()

    def block(self, rank: int, on: object = None) -> None:
        """`rank` waits in the rendezvous for other ranks (`enable` ends the wait).

        Args:
            rank: the rank.
            on: what it waits for, when a `wake(on)` should enable it (a channel).
        """
        self.states[rank] = BLOCKED
        if on is not None:
            self._waiting_on[rank] = on
        self._decide()

    def enable(self, points: dict[int, str]) -> None:
        """What some ranks waited for happened (their collective completed, a message came):
        each is parked at its point, including a running one (the rank that completed it).

        Args:
            points: by rank, where it goes on from.
        """
        for rank, point in points.items():
            if self.states[rank] in (BLOCKED, RUNNING):
                self.states[rank] = PARKED
                self.next[rank] = (point, "")
                self._waiting_on.pop(rank, None)
        self._decide()

    def wake(self, on: object, point: str) -> None:
        """Enable every rank blocked waiting for `on` (a message of channel `on` was posted).

        Args:
            on: what they wait for.
            point: where they go on from.
        """
        self.enable({r: point for r, what in sorted(self._waiting_on.items()) if what == on})

    def finish(self, rank: int) -> None:
        self.states[rank] = DONE
        self._decide()

    def stop(self) -> None:
        """The launch was aborted: every rank runs on (to unwind), no more decisions."""
        self.stopped = True
        self._notify()

    def running(self) -> list[int]:
        return [r for r, s in self.states.items() if s == RUNNING]

    def _decide(self) -> None:
        self.progress = debugger_clock.now()
        if self.stopped or RUNNING in self.states.values():
            return
        enabled = [r for r, s in self.states.items() if s == PARKED]
        if not enabled:  # every rank blocked or done: the rendezvous tells a deadlock
            return
        rank = self.policy.choose(len(self.decisions) + 1, enabled, self.next)
        point, detail = self.next.pop(rank)
        self.decisions.append(Decision(rank, point, detail))
        self.states[rank] = RUNNING
        self._notify()


__all__ = ["BLOCKED", "DONE", "PARKED", "RUNNING", "START", "Scheduler"]
