"""Ranks as threads: each one bound to its XLA device for its whole life and fed jobs by a queue.

This is torch_xla's own CPU runtime shape (one process, a thread per device). The same rank
thread also plays the local ranks inside each worker process of a multi-process topology.
"""

from __future__ import annotations

import queue
import threading
import traceback
from collections.abc import Callable
from typing import Any

from . import context
from .callsite import thread_location, thread_stack
from .topology import Topology


class RankThread:
    """The thread that plays one rank; jobs are `(run, fn, args, kwargs)` tuples."""

    def __init__(self, rank: int, device: str):
        self.rank = rank
        self.device = device
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, name=f"xlasim-rank-{rank}", daemon=True)
        self.thread.start()

    def submit(self, run: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        self.jobs.put((run, fn, args, kwargs))

    def retire(self) -> None:
        """Let the thread exit once its current job (if any) returns."""
        self.jobs.put(None)

    def _loop(self) -> None:
        import torch_xla  # not at module import: emulation must choose the platform first

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
                run.finish(self.rank, error=error, traceback_text=user_traceback(error))
            else:
                run.finish(self.rank, result=result)
            finally:
                context.bind(None)

    def location(self) -> str:
        return thread_location(self.thread)

    def stack(self) -> str:
        return thread_stack(self.thread)


def user_traceback(error: BaseException) -> str:
    """The traceback of a rank's exception without the rank thread's own frame."""
    tb = error.__traceback__.tb_next if error.__traceback__ else None
    return "".join(traceback.format_exception(type(error), error, tb))


class ThreadRanks:
    """Every rank of a one-process topology, as warm threads of this process."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self._threads = [RankThread(r, topology.device_of(r)) for r in range(topology.devices)]

    def dispatch(self, run: Any, jobs: list[tuple[Callable[..., Any], tuple, dict]]) -> None:
        for rank, (fn, args, kwargs) in enumerate(jobs):
            self._threads[rank].submit(run, fn, args, kwargs)

    def location(self, rank: int) -> str:
        return self._threads[rank].location()

    def stack(self, rank: int) -> str:
        return self._threads[rank].stack()

    def check(self, run: Any) -> None:
        """Threads cannot die under a run without reporting: nothing to watch."""

    def finished(self, run: Any) -> None:
        """Runs hold no resources of this backend."""

    def recover(self, stuck: list[int]) -> None:
        """Threads still busy after an abort cannot be killed: abandon them, start fresh ones."""
        for rank in stuck:
            self._threads[rank].retire()
            self._threads[rank] = RankThread(rank, self.topology.device_of(rank))

    def close(self) -> None:
        for rank_thread in self._threads:
            rank_thread.retire()
