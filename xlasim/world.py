"""A warm world of N rank threads, each bound to its own XLA CPU device, and how a function runs on it.

Threads are started once and kept, so launching a function costs a queue put per rank, not a
process spawn. `World.run` is the supervisor: it waits for every rank, releases the others at
once when one fails, turns a hang into a report with every rank's stack, and replaces threads
that could not be released so the next run starts clean.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from . import context
from .errors import CollectiveTimeoutError, DeviceCountError, RankFailedError, WorldAbortedError
from .run import Run
from .topology import Topology

#: How long released ranks get to unwind after an abort before their threads are replaced.
RELEASE_GRACE_S = 1.0
DEFAULT_COLLECTIVE_TIMEOUT_S = 60.0


def default_collective_timeout() -> float:
    """The collective wait bound: `XLASIM_TIMEOUT` seconds, else 60."""
    return float(os.environ.get("XLASIM_TIMEOUT", DEFAULT_COLLECTIVE_TIMEOUT_S))


class _Worker:
    """The thread that plays one rank, bound to its device for its whole life."""

    def __init__(self, rank: int, device: str):
        self.rank = rank
        self.device = device
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"xlasim-rank-{rank}", daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        import torch_xla  # not at module import: emulation must set the platform first

        torch_xla._XLAC._xla_set_default_device(self.device)
        while True:
            job = self.jobs.get()
            if job is None:
                return
            run, fn, args, kwargs = job
            context.bind(context.RankContext(run, self.rank))
            try:
                result = fn(*args, **kwargs)
            except BaseException as error:  # every failure is reported, none is lost
                user_traceback = error.__traceback__.tb_next if error.__traceback__ else None
                text = "".join(traceback.format_exception(type(error), error, user_traceback))
                run.finish(self.rank, error=error, traceback_text=text)
            else:
                run.finish(self.rank, result=result)
            finally:
                context.bind(None)


class World:
    """N emulated cores; `run(fn)` calls `fn(rank, *args)` on each and returns their results."""

    def __init__(self, topology: Topology, collective_timeout: float | None = None):
        if topology.devices < 1:
            raise DeviceCountError(f"a world needs at least 1 device, got {topology.devices}")
        self.topology = topology
        self.collective_timeout = (
            default_collective_timeout() if collective_timeout is None else collective_timeout
        )
        self._workers = [_Worker(r, topology.device_of(r)) for r in range(topology.devices)]
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return self.topology.devices

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

        `size` selects a sub-world of the first `size` cores (default: all). `timeout` bounds
        the whole run; `collective_timeout` bounds each wait inside a collective.
        """
        size = self.size if size is None else size
        if not 1 <= size <= self.size:
            raise DeviceCountError(
                f"asked for {size} ranks but this world emulates {self.size} cores "
                f"(start it with more devices: xlasim.emulate(devices=N) or XLASIM_DEVICES)"
            )
        if context.current() is not None:
            raise RuntimeError(
                f"a world cannot be launched from inside rank {context.current().rank}: "
                "xmp.spawn / torch_xla.launch were called from a spawned function"
            )
        with self._lock:
            run = Run(self.topology, size, self.collective_timeout)
            for rank in range(size):
                worker = self._workers[rank]
                run.threads[rank] = worker.thread
                call_args = (rank, *args) if pass_rank else tuple(args)
                worker.jobs.put((run, fn, call_args, kwargs or {}))
            self._supervise(run, timeout)
            return self._outcome(run)

    def _supervise(self, run: Run, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        with run.cond:
            while not run.stopped():
                if run.abort_cause is not None:
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    run.abort(
                        CollectiveTimeoutError(
                            f"the run did not finish within {timeout:g} s.\n" + run.describe_ranks()
                        )
                    )
                    break
                wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
                run.cond.wait(timeout=max(wait, 0.0))
            release_deadline = time.monotonic() + RELEASE_GRACE_S
            while not run.stopped() and time.monotonic() < release_deadline:
                run.cond.wait(timeout=release_deadline - time.monotonic())
        if not run.stopped():
            self._replace_stuck_workers(run)

    def _replace_stuck_workers(self, run: Run) -> None:
        """Threads still busy after an abort cannot be killed: abandon them, start fresh ones."""
        for rank in run.unfinished_ranks():
            self._workers[rank].jobs.put(None)
            self._workers[rank] = _Worker(rank, self.topology.device_of(rank))

    @staticmethod
    def _outcome(run: Run) -> list[Any]:
        if run.failures:
            raise _rank_failure(run)
        if run.abort_cause is not None:
            raise run.abort_cause
        return list(run.results)

    def close(self) -> None:
        for worker in self._workers:
            worker.jobs.put(None)


def _rank_failure(run: Run) -> RankFailedError:
    ranks = sorted(run.failures)
    first = run.failures[ranks[0]]
    sections = "\n".join(
        f"--- rank {r}/{run.size} raised {type(run.failures[r]).__name__}: {run.failures[r]}\n"
        f"{run.tracebacks[r].rstrip()}"
        for r in ranks
    )
    released = [r for r in run.stopped_ranks(failed=True) if r not in run.failures]
    note = f"\n(ranks {released} were released from their waits)" if released else ""
    error = RankFailedError(
        f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} of {run.size} raised "
        f"{type(first).__name__}: {first}\n{sections}{note}",
        run.failures,
        run.tracebacks,
    )
    error.__cause__ = first
    return error


__all__ = ["World", "WorldAbortedError"]
