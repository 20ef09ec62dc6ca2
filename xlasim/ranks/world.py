"""A warm world of emulated ranks, and how a function runs on it.

Ranks are started once and kept (threads of this process, or worker processes for multi-process
topologies), so launching a function costs a message per rank, not a process spawn. `World.run`
is the supervisor: it waits for every rank, releases the others at once when one fails, turns a
hang into a report with every rank's stack, and replaces ranks that could not be released so the
next run starts clean. It also serves the ranks' debuggers at the terminal (docs/debugging.md):
while a rank is stopped in one, every bound is measured on a clock that stands still.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from typing import Any, Protocol

from .. import races
from ..base import debugger_clock, rank_context
from ..base.errors import (
    CollectiveTimeoutError,
    DeviceCountError,
    RankFailedError,
    WorldAbortedError,
    XlasimError,
    launch_inside_rank,
)
from ..base.public import public
from ..base.topology import Topology
from ..emulation.rendezvous import Run
from ..pods import membership as pod
from ..reports import rank_debugger, rank_output
from ..reports.hang_report import RankReporter, rank_span
from ..reports.rank_outcome import RESULT_ONLY, Collect, RankOutcome
from ..trace_files import session as traces
from . import launch_reset
from .threads import ThreadRanks

#: One rank's job: the function, its positional and its keyword arguments.
Job = tuple[Callable[..., Any], tuple, dict]


class Ranks(RankReporter, Protocol):
    """A world's warm ranks, wherever they live: threads of this process (`ThreadRanks`) or
    worker processes (`ProcessRanks`). Each rank also says where it is (`location`, `stack`)."""

    def dispatch(self, run: Run, jobs: list[Job]) -> None:
        """Start `jobs[r]` on rank r of `run`, for every rank of the run.

        Args:
            run: the launch's shared state (its rendezvous), which the ranks meet in.
            jobs: one `(fn, args, kwargs)` per rank of the run, in rank order (the rank, when
                passed, is already the first of `args`).
        """

    def check(self, run: Run) -> None:
        """Raise in the supervising thread what the ranks cannot report themselves (a worker
        process that died)."""

    def finished(self, run: Run) -> None:
        """The run ended: let go of what it held."""

    def flush_records(self) -> None:
        """Write out what the ranks recorded: events (docs/events.md), coverage data."""

    def recover(self, stuck: list[int]) -> None:
        """Replace the ranks that could not be released, so the next run starts clean."""

    def close(self) -> list[int]:
        """Stop every rank; return those that could not be stopped."""


#: How long released ranks get to unwind after an abort before their threads are replaced.
RELEASE_GRACE_S = 1.0
DEFAULT_COLLECTIVE_TIMEOUT_S = 60.0
DEFAULT_RUN_TIMEOUT_S = 3600.0


def default_run_timeout() -> float:
    """The bound of a whole run when the caller gives none: `XLASIM_RUN_TIMEOUT` seconds, else
    an hour. Code that bypasses the emulation (a collective XLA runs itself) would otherwise
    hang without bound; a run that is meant to last longer says so with `timeout=`."""
    return float(os.environ.get("XLASIM_RUN_TIMEOUT", DEFAULT_RUN_TIMEOUT_S))


def default_collective_timeout() -> float:
    """The collective wait bound: `XLASIM_TIMEOUT` seconds, else 60."""
    return float(os.environ.get("XLASIM_TIMEOUT", DEFAULT_COLLECTIVE_TIMEOUT_S))


@public
class World:
    """N emulated cores; `run(fn)` calls `fn(rank, *args)` on each and returns their results.

    Args:
        topology: the slice: its cores become warm ranks, threads of this process
            (`processes=1`) or worker processes.
        collective_timeout: seconds a rank waits inside one collective for its peers (default
            `XLASIM_TIMEOUT`, else 60); past it the run fails with every rank's stack.
    """

    def __init__(self, topology: Topology, collective_timeout: float | None = None):
        if topology.devices < 1:
            raise DeviceCountError(f"a world needs at least 1 device, got {topology.devices}")
        self.topology = topology
        self.collective_timeout = (
            default_collective_timeout() if collective_timeout is None else collective_timeout
        )
        self._ranks: Ranks = (
            ThreadRanks(topology)
            if topology.threaded and pod.from_environment() is None
            else _process_ranks(topology, self.collective_timeout)
        )
        self._lock = threading.Lock()
        #: Launches run on this world, and the collectives they completed, by op: how a caller
        #: tells a script that really exercised the slice from one that skipped its checks.
        self.launches = 0
        self.collectives: Counter[str] = Counter()
        #: The last launch as tracing saw it: its files when it was traced (docs/tracing.md).
        self.trace: traces.Launch | None = None
        #: The interleaving the last launch took, when it followed a schedule (docs/races.md).
        self.interleaving: races.Interleaving | None = None

    @property
    def size(self) -> int:
        return self.topology.devices

    @property
    def ranks_are_threads(self) -> bool:
        """Whether the ranks are threads of this process (not worker processes or machines)."""
        return isinstance(self._ranks, ThreadRanks)

    def run(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict | None = None,
        *,
        size: int | None = None,
        timeout: float | None = None,
        pass_rank: bool = True,
    ) -> list[Any]:
        """Run `fn(rank, *args, **kwargs)` on ranks 0..size-1 and return the per-rank results.

        Args:
            fn: the function each rank calls; it must pickle (by reference) for worker processes.
            args: positional arguments after the rank.
            kwargs: keyword arguments.
            size: ranks to run, a sub-world of the first `size` cores (default: all).
            timeout: seconds the whole run may take (default `XLASIM_RUN_TIMEOUT`, else 3600).
            pass_rank: pass the rank as the first argument (False: `fn(*args, **kwargs)`).

        Returns:
            Each rank's result, in rank order.

        Raises:
            RankFailedError: ranks raised; it holds every rank's outcome (`run_outcomes`).
            CollectiveMismatchError: ranks called collectives that do not match (or deadlocked).
            CollectiveTimeoutError: a rank never arrived, or the run outlived `timeout`.
        """
        outcomes = self.run_outcomes(
            fn, args, kwargs, size=size, timeout=timeout, pass_rank=pass_rank
        )
        if any(o.raised for o in outcomes):
            error = rank_failure(outcomes)
            if self.trace is not None and self.trace.files is not None:
                traces.name_files(error, self.trace.files)
            raise error
        return [o.result for o in outcomes]

    def run_outcomes(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict | None = None,
        *,
        size: int | None = None,
        timeout: float | None = None,
        pass_rank: bool = True,
        collect: Collect = RESULT_ONLY,
    ) -> list[RankOutcome]:
        """Run `fn` as `run` does, and return how every rank ended, in rank order: its result or
        its exception and traceback, and what `collect` asks for (output, XLA counters, a
        rendering of the failure made where it was raised). Ranks raising is not an error here;
        a failure of the run itself is (`CollectiveMismatchError`, `DeadlockError`,
        `CollectiveTimeoutError`, a worker process that died).

        An interrupt (Ctrl-C) while the ranks run releases them before it propagates, so the
        world serves the next run.

        Args:
            fn: the function each rank calls (as for `run`).
            args: positional arguments after the rank.
            kwargs: keyword arguments (None: none).
            size: ranks to run, the first `size` cores (None: all).
            timeout: seconds the whole run may take (None: `XLASIM_RUN_TIMEOUT`, else 3600).
            pass_rank: pass the rank as the first argument.
            collect: what each outcome records besides result and error (`Collect`).

        Returns:
            Every rank's `RankOutcome`, in rank order.
        """
        size = self.size if size is None else size
        if not 1 <= size <= self.size:
            raise DeviceCountError(
                f"asked for {size} ranks but this world emulates {self.size} cores "
                f"(start it with more devices: xlasim.emulate(devices=N) or XLASIM_DEVICES)"
            )
        if rank_context.current() is not None:
            raise launch_inside_rank(rank_context.current().rank)
        collect = races.requested(collect)
        self._refuse_on_a_pod(collect)
        jobs = [
            (fn, (rank, *args) if pass_rank else tuple(args), kwargs or {}) for rank in range(size)
        ]
        with self._lock, launch_reset.environment(), ExitStack() as stack:
            traced = self.trace = stack.enter_context(traces.launch())
            run = Run(
                self.topology, size, self.collective_timeout, reporter=self._ranks, collect=collect
            )
            if self.topology.threaded:  # the ranks write to this process: kept or passed on
                stack.enter_context(rank_output.routed())  # whole lines (rank_output.py)
            if self.ranks_are_threads:  # their breakpoints stop them here (docs/debugging.md)
                stack.enter_context(rank_debugger.hooks())
            try:
                self._ranks.dispatch(run, jobs)
                self._supervise(run, default_run_timeout() if timeout is None else timeout)
            except BaseException as interrupt:  # KeyboardInterrupt in the launching thread
                run.abort(interrupt)  # release the ranks, so the next run finds them free
                self._release(run)
                raise
            finally:
                self.launches += 1
                self.collectives.update(run.completed)
                self.interleaving = races.recorded(run.scheduler)
                races.note_interleaving(self.interleaving, run.outcomes, run.abort_cause)
            outcomes = self._outcomes(run)
            traced.failed = any(o.raised for o in outcomes)
        races.check(run.syncs, outcomes, rank_failure, trace=traced.files)
        return outcomes

    def _refuse_on_a_pod(self, collect: Collect) -> None:
        """A schedule is refused on a pod's machines before any rank starts: the machines
        have no scheduler in common (docs/races.md, "Pods")."""
        if collect.schedule is not None and pod.from_environment() is not None:
            raise XlasimError(races.refused_on_a_pod("--schedule/--schedules"))

    def _supervise(self, run: Run, timeout: float) -> None:
        deadline = debugger_clock.now() + timeout
        while True:
            pause = _serve_debuggers(run)
            with run.cond:
                if run.stopped() or run.abort_cause is not None:
                    break
                if debugger_clock.now() >= deadline:
                    run.abort(
                        CollectiveTimeoutError(
                            f"the run did not finish within {timeout:g} s.\n" + run.describe_ranks()
                        )
                    )
                    break
                self._ranks.check(run)
                if run.desk is None or not run.desk.waiting():
                    run.cond.wait(timeout=max(min(pause, deadline - debugger_clock.now()), 0.0))
        self._release(run)

    def _release(self, run: Run) -> None:
        """Give aborted ranks a moment to unwind (more while one is in a debugger), then replace
        those that did not."""
        release_deadline = debugger_clock.now() + RELEASE_GRACE_S
        try:
            while True:
                pause = _serve_debuggers(run)
                with run.cond:
                    left = release_deadline - debugger_clock.now()
                    if run.stopped() or left <= 0:
                        break
                    if run.desk is None or not run.desk.waiting():
                        run.cond.wait(timeout=min(pause, left))
        finally:
            if run.desk is not None:
                run.desk.close()
        self._ranks.finished(run)
        if not run.stopped():
            if self.trace is not None and self.trace.directory is not None:
                self._ranks.flush_records()  # what stuck ranks recorded, before they are replaced
            self._ranks.recover(run.unfinished_ranks())

    @staticmethod
    def _outcomes(run: Run) -> list[RankOutcome]:
        """Every rank's outcome; a rank still unwinding after an abort counts as released."""
        with run.cond:
            outcomes = [
                o or RankOutcome(r, run.size, error=WorldAbortedError(run.abort_cause))
                for r, o in enumerate(run.outcomes)
            ]
        if run.abort_cause is not None and not any(o.raised for o in outcomes):
            races.check(run.syncs, outcomes, rank_failure, aborted=run.abort_cause)
            raise run.abort_cause
        return outcomes

    def flush_records(self) -> None:
        """Have the ranks write out now what they recorded: events, coverage data (a pod's
        machine before it sends its coverage data to the others, `pod_coverage.py`)."""
        self._ranks.flush_records()

    def agree_across_machines(self, topic: str, text: str, timeout: float) -> dict[int, str]:
        """On a machine of a pod (docs/pods.md): what every other machine answers about `topic`
        when this one answers `text`, by machine; off a pod there are no others: `{}`.

        Args:
            topic: the question, the same text on every machine.
            text: this machine's answer.
            timeout: how long the slowest machine may take to answer (seconds).
        """
        agree = getattr(self._ranks, "agree", None)  # only `MachineRanks` has other machines
        return {} if agree is None else agree(topic, text, timeout)

    def close(self) -> list[int]:
        """Stop the world's ranks; returns the ranks that could not be stopped (stuck in
        native code), which would abort the interpreter at exit."""
        return self._ranks.close()


def _serve_debuggers(run: Run) -> float:
    """Serve the ranks' debugger requests that wait (at the terminal: the launching thread
    owns it); how long the caller may then wait for the ranks before it calls again."""
    if run.desk is None:
        return 1.0
    paused = debugger_clock.paused()
    pause = run.desk.serve()
    if paused and not debugger_clock.paused():
        run.recheck()  # deadlocks are looked for again once no rank is in a debugger
    return 1.0 if pause is None else min(pause, 1.0)


def _process_ranks(topology: Topology, collective_timeout: float) -> Ranks:
    settings = pod.from_environment()
    if settings is not None:  # this machine holds a share of a pod's hosts (docs/pods.md)
        from ..pods.ranks import MachineRanks

        return MachineRanks(topology, settings, collective_timeout)
    from .processes import ProcessRanks

    return ProcessRanks(topology)


def rank_failure(outcomes: Sequence[RankOutcome]) -> RankFailedError:
    """The error of a run whose ranks raised: a section per failing rank with its traceback,
    and every rank's outcome attached."""
    failing = [o for o in outcomes if o.raised]
    first = failing[0].error
    sections = "\n".join(
        f"--- rank {o.rank}/{o.size} raised {type(o.error).__name__}: {o.error}\n"
        f"{o.traceback.rstrip()}"
        for o in failing
    )
    released = [o.rank for o in outcomes if o.released]
    note = f"\n({rank_span(released)} were released from their waits)" if released else ""
    error = _failure_class([o.error for o in failing])(  # type: ignore[misc]
        f"{rank_span([o.rank for o in failing])} of {outcomes[0].size} raised "
        f"{type(first).__name__}: {first}\n{sections}{note}",
        outcomes,
    )
    error.__cause__ = first
    return error


def _failure_class(failures: list[BaseException]) -> type[RankFailedError]:
    """RankFailedError, also an instance of the ranks' own exception type when they all raised
    the same one, so `except ValueError` around `xmp.spawn` works as with torch_xla's processes."""
    kinds = {type(f) for f in failures}
    if len(kinds) != 1:
        return RankFailedError
    (kind,) = kinds
    if not issubclass(kind, Exception) or issubclass(kind, RankFailedError):
        return RankFailedError
    try:
        name = f"RankFailedError[{kind.__name__}]"  # printed as xlasim.RankFailedError[...]
        return type(name, (RankFailedError, kind), {"__module__": RankFailedError.__module__})
    except TypeError:  # incompatible layouts (e.g. OSError): the plain error still names it
        return RankFailedError


__all__ = ["World", "WorldAbortedError"]
