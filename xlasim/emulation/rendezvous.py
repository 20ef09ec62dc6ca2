"""One execution of a function on every rank of a world, and the rendezvous its ranks share.

A `Run` is the emulated equivalent of one TPU program launch. It owns:

- the rendezvous slots where ranks meet for collectives (keyed by the participating ranks and
  how many collectives those ranks already did together, as XLA matches them by program order),
- point-to-point mailboxes for send/recv,
- each rank's state (running, waiting where, done, failed) so that a rank that can never be
  met is reported at once instead of hanging,
- under a schedule, whose turn it is (`races.scheduler`): ranks run one at a time, and every
  scheduling point (`point`, a collective's entry and exit, send, receive) waits for its turn,
- the first cause of an abort, which releases every waiting rank.

All state is guarded by one condition variable; waits are bounded by `collective_timeout`,
measured on the clock that stands still while a rank is stopped in a debugger
(`base/debugger_clock.py`); the ranks' debuggers reach the terminal through the run
(`debug`, served by the launching thread: `reports/debugger_desk.py`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..base import debugger_clock
from ..base.errors import (
    CollectiveMismatchError,
    CollectiveTimeoutError,
    DeadlockError,
    ScheduleStalledError,
    WorldAbortedError,
)
from ..base.topology import Topology
from ..events import recorder
from ..races.launch_requests import schedule_depth
from ..races.scheduler import Scheduler
from ..races.syncs import SyncLog
from ..races.watch import synchronizing
from ..reports import hang_report
from ..reports.debugger_desk import Desk, Request
from ..reports.hang_report import RankReporter, rank_span
from ..reports.rank_outcome import RESULT_ONLY, Collect, RankOutcome


@dataclass(frozen=True)
class Call:
    """What one rank asked for: the op, the arguments that must agree, and where it asked."""

    op: str
    signature: tuple[tuple[str, Any], ...]
    location: str

    def describe(self) -> str:
        args = ", ".join(f"{name}={value}" for name, value in self.signature)
        return f"{self.op}({args}) at {self.location}"


@dataclass
class _Slot:
    participants: tuple[int, ...]
    opened_at: float
    #: The participants that meet here: all of them, but on a pod only this machine's.
    expected: int
    arrivals: dict[int, tuple[Call, Any]] = field(default_factory=dict)
    complete: bool = False
    done: bool = False
    result: Any = None
    error: BaseException | None = None
    taken: int = 0
    #: When each member arrived (`time.monotonic_ns`), kept only while events are recorded.
    arrived: dict[int, int] = field(default_factory=dict)


RUNNING, WAITING, DONE, FAILED = "running", "waiting", "done", "failed"
#: A rank another machine of a pod runs (xlasim/machines): met through `Run.machines`.
REMOTE = "remote"
ENDED = (DONE, FAILED, REMOTE)


@dataclass
class _RankState:
    status: str = RUNNING
    call: Call | None = None
    satisfiable: Callable[[], bool] | None = None


def mismatch(participants: Sequence[int], calls: dict[int, Any]) -> CollectiveMismatchError | None:
    """The error of calls that met at one collective and do not all match (by `op` and
    `signature`), each distinct call with its ranks; None when they match.

    Args:
        participants: the collective's ranks.
        calls: the calls that arrived, by rank (anything with `op`, `signature`, `describe()`).
    """
    first = next(iter(calls.values()))
    if all((c.op, c.signature) == (first.op, first.signature) for c in calls.values()):
        return None
    lines = "\n".join(
        f"  {rank_span(ranks)}: {description}"
        for description, ranks in hang_report.by_description(calls).items()
    )
    return CollectiveMismatchError(
        f"ranks {list(participants)} met at the same collective with calls that do not match "
        f"(on a TPU this hangs or corrupts data):\n{lines}"
    )


class RunObjects:
    """Objects of one run made on first use: shared by its ranks, or private to one rank (what a
    TPU process keeps in its globals). Mixed into `Run` and into worker processes' run handles."""

    def __init__(self) -> None:
        self._objects: dict[Any, Any] = {}
        self._objects_lock = threading.Lock()

    def shared(self, key: Any, factory: Callable[[], Any]) -> Any:
        """The run's object under `key`, made by `factory` on first use, shared by its ranks.

        Args:
            key: what names it in this run.
            factory: makes it, once.
        """
        with self._objects_lock:
            if key not in self._objects:
                self._objects[key] = factory()
            return self._objects[key]

    def per_rank(self, rank: int, key: Any, factory: Callable[[], Any]) -> Any:
        """`rank`'s own object under `key`, made by `factory` on its first use.

        Args:
            rank: the rank it belongs to.
            key: what names it for that rank.
            factory: makes it, once per rank.
        """
        return self.shared((key, rank), factory)


class Run(RunObjects):
    """The shared state of one launch of `size` ranks."""

    def __init__(
        self,
        topology: Topology,
        size: int,
        collective_timeout: float,
        reporter: RankReporter | None = None,
        collect: Collect = RESULT_ONLY,
    ):
        self.topology = topology
        self.size = size
        self.collective_timeout = collective_timeout
        self.reporter = reporter
        #: What the ranks record in their outcomes beyond result and error.
        self.collect = collect
        self.cond = threading.Condition()
        #: How each rank ended, as it reported (None while it runs).
        self.outcomes: list[RankOutcome | None] = [None] * size
        self.abort_cause: BaseException | None = None
        self._states = [_RankState() for _ in range(size)]
        self._slots: dict[tuple[tuple[int, ...], int], _Slot] = {}
        self._sequence: list[dict[tuple[int, ...], int]] = [{} for _ in range(size)]
        self._mailboxes: dict[Any, deque[tuple[Call, Any]]] = {}
        #: Collectives completed in this run, by op (each counted once, not once per rank).
        self.completed: Counter[str] = Counter()
        #: Every rank's synchronisations, when the run detects races.
        self.syncs = SyncLog(size) if collect.races else None
        #: On a pod, where this machine's ranks meet the other machines' (`mark_remote`).
        self.machines: Any = None
        #: Whose turn it is, when the launch follows a schedule (`collect.schedule`).
        self.scheduler = (
            None
            if collect.schedule is None
            else Scheduler(collect.schedule, range(size), self.cond.notify_all, schedule_depth())
        )
        #: The ranks' debugger sessions, once a rank stops in one (`debug`).
        self.desk: Desk | None = None
        super().__init__()

    def here(self, participants: Sequence[int]) -> int:
        """How many of `participants` run on this machine (all, unless on a pod)."""
        return sum(self._states[r].status != REMOTE for r in participants)

    def mark_remote(self, ranks: Sequence[int], machines: Any) -> None:
        """Ranks that run on other machines of a pod: this run neither starts nor waits for
        them; collectives with them complete through `machines.meet` (xlasim/pods).

        Args:
            ranks: the global ranks other machines run.
            machines: this machine's link to the pod (`pods/meeting.py`'s `PodMeetings`).
        """
        self.machines = machines
        for rank in ranks:
            self._states[rank].status = REMOTE
            self.outcomes[rank] = RankOutcome(rank, self.size)

    def store(self):
        """The torch.distributed store of this run's `xla://` rendezvous."""
        import torch.distributed as dist

        return self.shared("dist-store", dist.HashStore)

    # ----------------------------------------------------------------- rank lifecycle

    def finish(self, outcome: RankOutcome) -> None:
        """Record that a rank's function returned or raised; a rank that raised by itself (not
        released by an abort) aborts the run."""
        with self.cond:
            self.outcomes[outcome.rank] = outcome
            state = self._states[outcome.rank]
            state.status = DONE if outcome.error is None else FAILED
            if outcome.raised:
                self._abort(outcome.error)  # type: ignore[arg-type]
            state.call = None
            if self.scheduler is not None:
                self.scheduler.finish(outcome.rank)
            self._check_progress()
            self.cond.notify_all()

    def stopped(self) -> bool:
        return all(state.status in ENDED for state in self._states)

    def unfinished_ranks(self) -> list[int]:
        with self.cond:
            return [r for r, s in enumerate(self._states) if s.status not in ENDED]

    def abort(self, cause: BaseException) -> None:
        """Release every waiting rank; the first cause given wins."""
        with self.cond:
            self._abort(cause)

    def _abort(self, cause: BaseException) -> None:
        if self.abort_cause is None:
            self.abort_cause = cause
        if self.scheduler is not None:
            self.scheduler.stop()
        self.cond.notify_all()

    def _raise_if_aborted(self) -> None:
        if self.abort_cause is not None:
            raise WorldAbortedError(self.abort_cause)

    # ----------------------------------------------------------------- collectives

    def gather(
        self,
        rank: int,
        participants: Sequence[int],
        call: Call,
        payload: Any,
        combine: Callable[[list[Any]], Any] | None = None,
    ) -> Any:
        """Meet the other participants; return `combine(payloads in participant order)`.

        The rank that completes the slot computes `combine` once for everyone; every
        participant gets the same object back and must not mutate it.

        Args:
            rank: the calling rank.
            participants: the group's ranks, in group order.
            call: the rank's call, which must match the others'.
            payload: what the rank brings (host tensors, bytes).
            combine: makes the result from the payloads in participant order; None returns the
                payloads.
        """
        self.point(rank, f"enter {call.op} at {call.location}")
        with synchronizing():
            result = self._gather(rank, tuple(participants), call, payload, combine)
        self._await_turn(rank)  # the collective's exit: every member was parked there
        return result

    def _gather(
        self,
        rank: int,
        participants: tuple[int, ...],
        call: Call,
        payload: Any,
        combine: Callable[[list[Any]], Any] | None,
    ) -> Any:
        with self.cond:
            self._raise_if_aborted()
            sequence = self._sequence[rank].get(participants, 0)
            self._sequence[rank][participants] = sequence + 1
            if self.syncs is not None:
                self.syncs.group(rank, participants, sequence)
            key = (participants, sequence)
            slot = self._slots.get(key)
            if slot is None:
                here = self.here(participants)
                slot = self._slots[key] = _Slot(participants, debugger_clock.now(), here)
            slot.arrivals[rank] = (call, payload)
            tracer = recorder.current()
            if tracer is not None:
                slot.arrived[rank] = time.monotonic_ns()
            completing = len(slot.arrivals) == slot.expected
            if completing:
                if tracer is not None:
                    tracer.meeting(participants, slot.arrived)
                self._check_signatures(slot)
                slot.complete = True
                self.completed[call.op] += 1
                if self.scheduler is not None:
                    self.scheduler.enable(
                        {r: f"leave {c.op} at {c.location}" for r, (c, _) in slot.arrivals.items()}
                    )
            else:
                self._wait_state(rank, call, lambda: slot.complete)
                self._check_progress()
                if self.scheduler is not None:
                    self.scheduler.block(rank)
                # Once every rank has arrived, the slot's completion is bounded by itself (a
                # meeting with other machines by its own bound, naming a silent machine).
                self._wait(rank, lambda: slot.done, slot.opened_at, lambda: not slot.complete)
        if completing:
            self._complete(key, slot, combine)
        with self.cond:
            slot.taken += 1
            if slot.taken == slot.expected:
                del self._slots[key]
        if slot.error is not None:
            raise slot.error
        return slot.result

    def _complete(
        self, key: tuple, slot: _Slot, combine: Callable[[list[Any]], Any] | None
    ) -> None:
        try:
            arrivals = slot.arrivals
            if slot.expected < len(slot.participants):  # the rest are on other machines
                arrivals = self.machines.meet(self, key, arrivals)
            payloads = [arrivals[r][1] for r in slot.participants]
            slot.result = combine(payloads) if combine is not None else payloads
        except Exception as error:
            slot.error = error
        with self.cond:
            slot.done = True
            self.cond.notify_all()

    def _check_signatures(self, slot: _Slot) -> None:
        calls = {rank: call for rank, (call, _) in slot.arrivals.items()}
        error = mismatch(slot.participants, calls)
        if error is not None:
            self._abort(error)
            raise WorldAbortedError(error) from error

    # ----------------------------------------------------------------- point to point

    def send(self, rank: int, channel: Any, call: Call, payload: Any) -> None:
        """Deposit a message; sends never block, as XLA's do not until the receiver runs. On a
        pod the channel's mailbox is the pod's (`machines.post`): any rank may receive.

        Args:
            rank: the sending rank.
            channel: the mailbox's name.
            call: the sender's call, handed to the receiver with the payload.
            payload: what is sent.
        """
        self.point(rank, f"send at {call.location}")
        with synchronizing():
            with self.cond:
                self._raise_if_aborted()
                if self.syncs is not None:
                    self.syncs.send(rank, channel)
                self.completed[call.op] += 1
                if self.machines is None:
                    self._mailboxes.setdefault(channel, deque()).append((call, payload))
                    if self.scheduler is not None:
                        self.scheduler.wake(channel, "take its message")
                    self.cond.notify_all()
                    return
            self.machines.post(self, rank, channel, call, payload)

    def receive(self, rank: int, channel: Any, call: Call) -> tuple[Call, Any]:
        """Take the oldest message of a channel, waiting (bounded) until one is there.

        Args:
            rank: the receiving rank.
            channel: the mailbox's name.
            call: the receiver's call, named if the wait ends in an error.
        """
        self.point(rank, f"receive at {call.location}")
        with synchronizing():
            if self.machines is None:
                return self._receive_here(rank, channel, call)
            self._raise_if_aborted()
            received = self.machines.take(self, rank, channel, call)
            with self.cond:
                if self.syncs is not None:
                    self.syncs.receive(rank, channel)
            return received

    def _receive_here(self, rank: int, channel: Any, call: Call) -> tuple[Call, Any]:
        with self.cond:
            self._raise_if_aborted()
            box = self._mailboxes.setdefault(channel, deque())
            while not box and self.scheduler is not None:  # its turn comes when a message does
                self._wait_state(rank, call, lambda: bool(box))
                self._check_progress()
                self.scheduler.block(rank, on=channel)
                self._wait(rank, lambda: self.scheduler.runs(rank), debugger_clock.now())
            if not box:
                self._wait_state(rank, call, lambda: bool(box))
                self._check_progress()
                self._wait(rank, lambda: bool(box), debugger_clock.now())
            if self.syncs is not None:
                self.syncs.receive(rank, channel)
            return box.popleft()

    # ----------------------------------------------------------------- the schedule's turns

    def point(self, rank: int, point: str, detail: str = "") -> None:
        """A scheduling point of `rank` (its start, a file operation it is about to make, a
        collective it enters...): under a schedule it waits here until the scheduler picks it.

        Args:
            rank: the rank.
            point: what it does next, as replays compare it (`write at prog.py:12 in f`).
            detail: what else a person reads (the path).
        """
        if self.scheduler is None:
            return
        with self.cond:
            self._raise_if_aborted()
            self.scheduler.park(rank, point, detail)
            self._await_turn(rank)

    def _await_turn(self, rank: int) -> None:
        """Wait until the scheduler lets `rank` run (at once without a schedule). Bounded: when
        the rank that has the turn reaches no scheduling point for `collective_timeout` seconds,
        the launch fails with `ScheduleStalledError`. An abort releases the rank
        (`WorldAbortedError`) at its point: after an abort no rank runs more of the program
        than up to its next point, so what a failed launch reports does not depend on timing."""
        if self.scheduler is None:
            return
        with self.cond:
            while not self.scheduler.runs(rank):
                self._raise_if_aborted()
                left = self.scheduler.progress + self.collective_timeout - debugger_clock.now()
                if left <= 0:
                    self._abort(self._stalled_error())
                    break
                self.cond.wait(timeout=min(left, 1.0))
            self._raise_if_aborted()

    def _stalled_error(self) -> ScheduleStalledError:
        scheduler = self.scheduler
        assert scheduler is not None
        holders = scheduler.running()
        last = scheduler.decisions[-1] if scheduler.decisions else None
        since = f" since it went on from {last.point}" if last is not None else ""
        return ScheduleStalledError(
            f"under schedule {scheduler.seed}, {rank_span(holders)} had the turn for more than "
            f"{self.collective_timeout:g} s and reached no scheduling point{since}: it waits for "
            "something no scheduling point sees (a lock a rank holds while it waits for its "
            "turn, a thread or process of its own, a lock file), or computes longer than that "
            "(raise the bound with XLASIM_TIMEOUT or collective_timeout=).\n"
            + self.describe_ranks()
        )

    # ----------------------------------------------------------------- waiting and reports

    def _wait_state(self, rank: int, call: Call, satisfiable: Callable[[], bool]) -> None:
        self._states[rank] = _RankState(WAITING, call, satisfiable)

    def _wait(
        self,
        rank: int,
        ready: Callable[[], bool],
        since: float,
        bounded: Callable[[], bool] = lambda: True,
    ) -> None:
        """Block (lock held) until `ready()`, an abort, or the collective timeout (while
        `bounded()`: past it, what the rank waits for has a bound of its own)."""
        try:
            while not ready():
                self._raise_if_aborted()
                if self.scheduler is not None:  # ranks taking turns are not stuck
                    since = max(since, self.scheduler.progress)
                remaining = since + self.collective_timeout - debugger_clock.now()
                if remaining <= 0 and bounded():
                    self._abort(self._late_error())
                    self._raise_if_aborted()
                self.cond.wait(timeout=min(remaining, 1.0) if remaining > 0 else 1.0)
        finally:
            self._states[rank].status = RUNNING
            self._states[rank].call = None

    def _check_progress(self) -> None:
        """Abort at once when the waiting ranks can never all be served; not while a rank is
        stopped in a debugger (`recheck` when it goes on)."""
        if self.abort_cause is not None or debugger_clock.paused():
            return
        waiting = [r for r, s in enumerate(self._states) if s.status == WAITING]
        if not waiting or any(self._states[r].satisfiable() for r in waiting):
            return
        running = [r for r, s in enumerate(self._states) if s.status in (RUNNING, REMOTE)]
        finished = [r for r, s in enumerate(self._states) if s.status in (DONE, FAILED)]
        stranded = self._stranded_slots(finished)
        if running and not stranded:
            return
        lines = hang_report.where_ranks_wait(
            {r: self._states[r].call for r in waiting}, running, finished
        )
        if stranded:
            error: Exception = CollectiveMismatchError(f"{stranded}:\n{lines}")
        else:
            error = DeadlockError(
                "every live rank waits and no wait can be satisfied (ranks called different "
                f"collectives, groups or send/recv pairs; on a TPU this hangs forever):\n{lines}"
            )
        self._abort(error)

    def _stranded_slots(self, finished: list[int]) -> str:
        for (participants, _), slot in self._slots.items():
            missing = [r for r in participants if r not in slot.arrivals]
            gone = [r for r in missing if r in finished]
            if gone and not slot.complete:
                op = next(iter(slot.arrivals.values()))[0].op
                # The gone ranks' own collectives tell a skip from a disagreement on groups.
                groups = sorted({p for r in gone for p in self._sequence[r] if p != participants})
                why = (
                    f"{rank_span(gone)} met in other groups {groups} instead: the ranks disagree "
                    "on `groups`"
                    if groups
                    else "a rank skipped a collective the others called"
                )
                return (
                    f"{op} among ranks {list(participants)} (missing ranks {gone}) can never "
                    f"complete: a rank it needs has already returned ({why})"
                )
        return ""

    def _late_error(self) -> CollectiveTimeoutError:
        """Why a wait outlived its bound: under a schedule, a rank that has the turn and keeps
        it (`ScheduleStalledError`); otherwise ranks that never arrived."""
        if self.scheduler is not None and self.scheduler.running():
            return self._stalled_error()
        return self._timeout_error()

    # ----------------------------------------------------------------- debuggers

    def debug(self, rank: int, request: Request) -> str | None:
        """A rank's debugger asks the terminal (`reports/rank_debugger.py`); the launching
        thread serves it (`World`), one session at a time; returns the terminal's answer.

        Args:
            rank: the rank whose debugger asks.
            request: what it asks (a prompt to show, or the end of its session).
        """
        with self.cond:
            if self.desk is None:
                self.desk = Desk(wake=self._wake)
            desk = self.desk
        return desk.ask(request)

    def _wake(self) -> None:
        with self.cond:
            self.cond.notify_all()

    def recheck(self) -> None:
        """Look for deadlocks again (none is looked for while a rank is in a debugger)."""
        with self.cond:
            self._check_progress()

    def _timeout_error(self) -> CollectiveTimeoutError:
        return CollectiveTimeoutError(
            f"a collective waited more than {self.collective_timeout:g} s for ranks that never "
            f"arrived (raise the bound with XLASIM_TIMEOUT or collective_timeout=).\n"
            + self.describe_ranks()
        )

    def describe_ranks(self) -> str:
        """Where every rank is, with Python stacks: the body of hang reports (`hang_report`)."""
        states = list(enumerate(self._states))
        return hang_report.describe_ranks(
            running=[r for r, s in states if s.status in (RUNNING, REMOTE)],
            waiting={r: s.call for r, s in states if s.status == WAITING and s.call},
            finished=[r for r, s in states if s.status in (DONE, FAILED)],
            reporter=self.reporter,
        )
