"""Ranks as threads: each one bound to its XLA device for its whole life and fed jobs by a queue.

This is torch_xla's own CPU runtime shape (one process, a thread per device). The same rank
thread also plays the local ranks inside each worker process of a multi-process topology.
"""

from __future__ import annotations

import ctypes
import functools
import queue
import sys
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from ..base import rank_context
from ..base.errors import RankAbandoned
from ..base.topology import Topology
from ..emulation.rendezvous import Run
from ..races import watch
from ..races.scheduler import START
from ..reports import rank_outcome, xla_counters
from ..reports.callsite import thread_location, thread_stack
from ..tpu import compiled_precision
from . import exit_guard, launch_reset

#: How long closing a world waits for its rank threads to stop.
CLOSE_GRACE_S = 5.0


class RankThread:
    """The thread that plays one rank; jobs are `(run, fn, args, kwargs)` tuples."""

    def __init__(self, rank: int, device: str):
        self.rank = rank
        self.device = device
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"xlasim-rank-{rank}", daemon=True)
        self.thread.start()

    def submit(self, run: Run, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        """Queue a job for the thread: it plays its rank of `run` calling `fn` once its
        current job, if any, returns.

        Args:
            run: the launch the job belongs to.
            fn: the rank's function.
            args: its positional arguments (the rank first, when passed).
            kwargs: its keyword arguments.
        """
        self.jobs.put((run, fn, args, kwargs))

    def retire(self) -> None:
        """Let the thread exit once its current job (if any) returns."""
        self.jobs.put(None)

    def interrupt(self) -> None:
        """Raise `RankAbandoned` in the thread at its next Python instruction.

        A rank stuck in user code cannot be killed, but it must not run on: it would burn a
        core for the rest of the process, and a thread still inside XLA's C++ code when the
        interpreter exits aborts the process ("terminate called without an active exception").

        Not while this process is traced (`_traced`): the thread is then abandoned as it is.
        """
        if _traced():
            return
        if self.thread.ident is not None and self.thread.is_alive():
            ctypes.pythonapi.PyThreadState_SetAsyncExc(
                ctypes.c_ulong(self.thread.ident), ctypes.py_object(RankAbandoned)
            )

    def _loop(self) -> None:
        with suppress(RankAbandoned):  # interrupted between jobs: nothing left to report
            self._serve()

    def _serve(self) -> None:
        """Serve jobs until retired. The rank's device is set up at its first job, not when the
        thread starts: that starts the XLA runtime, and a world started early (the plugin's,
        before the first test) must leave this process as a TPU VM's test process is until a
        test uses a device, one a `ProcessPoolExecutor` can still fork (`warm_world`)."""
        generator: launch_reset.DeviceGenerator | None = None
        while (job := self.jobs.get()) is not None:
            run, fn, args, kwargs = job
            if generator is None:
                try:
                    generator = self._set_up_device()
                except Exception as error:
                    self._fail_every_job(run, error)
                    return
            rank_context.bind(rank_context.RankContext(run, self.rank))
            try:
                ended = self._call(run, generator, fn, args, kwargs)
            finally:
                launch_reset.release_process_groups()
                rank_context.bind(None)
                _flush_std_streams()
            run.finish(ended)

    def _set_up_device(self) -> launch_reset.DeviceGenerator:
        import torch_xla  # not at module import: emulation must choose the platform first

        torch_xla._XLAC._xla_set_default_device(self.device)
        return launch_reset.DeviceGenerator(self.device)

    def _fail_every_job(self, run: Run, error: Exception) -> None:
        """The rank's device could not be set up (a PJRT plugin that cannot load: torch_xla's
        TPU plugin without libtpu): this job and each later one fail with that error as the
        rank's own, instead of the thread dying unseen while its launch waits for it."""

        def unusable(*args: Any, **kwargs: Any) -> Any:
            raise error

        while True:
            run.finish(rank_outcome.call(self.rank, run.size, unusable, (), {}, run.collect, run))
            if (job := self.jobs.get()) is None:
                return
            run = job[0]

    def _call(
        self,
        run: Run,
        generator: Any,
        fn: Callable[..., Any],
        args: tuple,
        kwargs: dict,
    ) -> rank_outcome.RankOutcome:
        """The rank's outcome of `fn`, with the extras its run collects (`outcome.Collect`)."""

        def fresh_start(*args: Any, **kwargs: Any) -> Any:
            generator.reset()
            compiled_precision.forget(self.device)  # a new TPU process has compiled nothing
            run.point(self.rank, START)
            try:
                return fn(*args, **kwargs)
            finally:
                watch.stop()

        collect = run.collect
        if collect.metrics:
            xla_counters.open_window(
                run, rank_context.RankContext(run, self.rank).addressable_device_count
            )
        host = run.topology.host_of(self.rank)
        point = functools.partial(run.point, self.rank) if collect.schedule is not None else None
        with watch.watching(self.rank, host, collect.races, point) as (log, unrecorded):
            ended = rank_outcome.call(self.rank, run.size, fresh_start, args, kwargs, collect, run)
        ended.accesses = log
        ended.unrecorded = unrecorded or None
        if collect.metrics:
            ended.metrics = xla_counters.close_window(run)
        return ended

    def location(self) -> str:
        return thread_location(self.thread)

    def stack(self) -> str:
        return thread_stack(self.thread)


def _traced() -> bool:
    """Whether a tracer or profiler runs in this process (coverage.py's, a debugger's, a
    profiler's), in which case no rank thread may be interrupted.

    CPython 3.11 keeps an exception raised in another thread pending for the whole interpreter
    until that thread runs Python code again, and a traced thread then loops for good at its
    next function call: a rank blocked in C (`Event.wait()`, a lock) never takes it, and the
    pytest process spun in `ThreadRanks.recover` under pytest-cov in the threads mode."""
    if sys.gettrace() or sys.getprofile() or threading.gettrace() or threading.getprofile():
        return True
    return any(frame.f_trace is not None for frame in sys._current_frames().values())


def _flush_std_streams() -> None:
    """Put out what the rank printed before its launch returns. A TPU process flushes at its
    exit, which ends the launch; a worker process outlives launches, and its stdout is a
    buffered pipe, so without this the prints would come out at some later launch or at the
    worker's exit (lost if it is stopped by a signal)."""
    for stream in (sys.stdout, sys.stderr):
        with suppress(Exception):  # a closed or replaced stream is not the rank's to mend
            stream.flush()


class ThreadRanks:
    """Every rank of a one-process topology, as warm threads of this process."""

    def __init__(self, topology: Topology):
        exit_guard.guard()
        self.topology = topology
        self._threads = [RankThread(r, topology.device_of(r)) for r in range(topology.devices)]
        self._abandoned: list[RankThread] = []

    def dispatch(self, run: Run, jobs: list[tuple[Callable[..., Any], tuple, dict]]) -> None:
        """Queue each rank's job on its thread.

        Args:
            run: the launch's shared state, which the rank threads meet in.
            jobs: one `(fn, args, kwargs)` per rank of the run, in rank order.
        """
        for rank, (fn, args, kwargs) in enumerate(jobs):
            self._threads[rank].submit(run, fn, args, kwargs)

    def location(self, rank: int) -> str:
        return self._threads[rank].location()

    def stack(self, rank: int) -> str:
        return self._threads[rank].stack()

    def check(self, run: Run) -> None:
        """Threads cannot die under a run without reporting: nothing to watch."""

    def flush_records(self) -> None:
        """Rank threads record into this process's recorder and coverage.py measurement,
        which their owners write out (a stuck thread is abandoned, not killed: its events stay
        in memory)."""

    def finished(self, run: Run) -> None:
        """Runs hold no resources of this backend."""

    def recover(self, stuck: list[int]) -> None:
        """Threads still busy after an abort: interrupt them, and start fresh ones in their
        place at once (an interrupted thread may take a while to reach Python code)."""
        for rank in stuck:
            self._threads[rank].retire()
            self._threads[rank].interrupt()
            self._abandoned.append(self._threads[rank])
            self._threads[rank] = RankThread(rank, self.topology.device_of(rank))

    def close(self, grace: float = CLOSE_GRACE_S) -> list[int]:
        """Stop every rank thread, waiting up to `grace` seconds in all; the ranks whose
        threads are still alive after that (stuck in native code) are returned."""
        threads = self._threads + self._abandoned
        for rank_thread in threads:
            rank_thread.retire()
        deadline = time.monotonic() + grace
        for rank_thread in threads:
            if rank_thread.thread.is_alive() and rank_thread.jobs.qsize() > 0:
                rank_thread.interrupt()  # busy: its retire message is still queued
            rank_thread.thread.join(max(0.0, deadline - time.monotonic()))
        return [t.rank for t in threads if t.thread.is_alive()]
