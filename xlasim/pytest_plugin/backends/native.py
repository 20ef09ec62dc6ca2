"""The native backend: per-rank tests run through the real `xmp.spawn`, in warm workers.

Nothing of torch_xla is patched. A background thread of the pytest process calls
`xmp.spawn(serve, ...)` once; torch_xla starts its worker processes exactly as a training
script's launch would (one per chip on a TPU VM, one process with a thread per device on CPU),
and every rank connects back over a Unix socket and serves jobs until the session ends. A test
costs a pickle round trip, not a process start. On a hang the workers are asked for their
Python stacks (faulthandler on SIGUSR1), killed, and started again for the next test.

The pytest process itself must not use an XLA device in this mode (torch_xla refuses to spawn
after the runtime started, and on a TPU the chips belong to the workers).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, Listener, wait
from pathlib import Path
from typing import Any

import pytest

from ...base import debugger_clock
from ...base.errors import CollectiveTimeoutError, XlasimError
from ...events import flushing
from ...ranks import rank_coverage
from ...reports.debugger_desk import Desk, Request
from ...reports.frames import PACKAGE_DIR
from ...reports.rank_outcome import RankOutcome
from ...trace_files import session as traces
from ..options.settings import Settings
from ..remote.jobs import FailureStyle, pack
from ..reporting.session_counts import SessionCounts
from .hardware import local_devices, platform
from .native_worker import FLUSH_CHANNEL, STACK_SIGNAL, serve

#: Bound on starting the workers (process start, torch_xla import, runtime start).
START_TIMEOUT_S = 180.0
#: How long workers get to write their stacks before they are killed.
STACK_GRACE_S = 1.0


class _SpawnedWorkers:
    """One generation of spawned workers: their connections, pids and the thread in spawn."""

    def __init__(self, size: int):
        self.size = size
        self.stack_dir = tempfile.mkdtemp(prefix="xlasim-stacks-")
        authkey = secrets.token_bytes(16)
        self._listener = Listener(family="AF_UNIX", authkey=authkey)
        self.conns: dict[int, Connection] = {}
        self.pids: dict[int, int] = {}
        #: Each worker process's connection for flushing its recorded events.
        self.flush_conns: list[Connection] = []
        self.spawn_error: BaseException | None = None
        args = (self._listener.address, authkey, self.stack_dir)
        self._spawning = threading.Thread(target=self._spawn, args=(args,), daemon=True)
        self._spawning.start()
        accepting = threading.Thread(target=self._accept, daemon=True)
        accepting.start()
        accepting.join(START_TIMEOUT_S)
        if len(self.conns) < size:
            self.kill()
            raise XlasimError(
                f"native backend: {len(self.conns)} of {size} workers connected within "
                f"{START_TIMEOUT_S:g} s"
                + (f" (xmp.spawn raised {self.spawn_error!r})" if self.spawn_error else "")
            )

    def _spawn(self, args: tuple[Any, ...]) -> None:
        import torch_xla.distributed.xla_multiprocessing as xmp

        try:
            xmp.spawn(serve, args=args)
        except BaseException as error:  # reported by whoever waits on the workers
            self.spawn_error = error
            self._listener.close()

    def _accept(self) -> None:
        try:
            while len(self.conns) < self.size:
                conn = self._listener.accept()
                index, pid = conn.recv()
                if index == FLUSH_CHANNEL:  # a process's, before its ranks'
                    self.flush_conns.append(conn)
                else:
                    self.conns[index], self.pids[index] = conn, pid
        except OSError:
            return  # listener closed: spawn failed or start timed out

    def stacks(self) -> dict[int, str]:
        """Every worker's Python stacks, dumped by faulthandler on request."""
        for pid in self.pids.values():
            _signal(pid, STACK_SIGNAL)
        time.sleep(STACK_GRACE_S)
        return {rank: _read(Path(self.stack_dir) / f"{pid}.txt") for rank, pid in self.pids.items()}

    def kill(self) -> None:
        for pid in self.pids.values():
            _signal(pid, signal.SIGKILL)
        for conn in [*self.conns.values(), *self.flush_conns]:
            conn.close()
        self._listener.close()

    def stop(self, wait: float = 0.0) -> None:
        """Tell every worker to stop; wait up to `wait` seconds for `xmp.spawn` to return
        (its processes ended: what they measured for coverage is saved by then)."""
        for conn in self.conns.values():
            with contextlib.suppress(OSError):
                conn.send(None)
        for conn in self.flush_conns:
            conn.close()
        self._listener.close()
        self._spawning.join(wait)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _read(path: Path) -> str:
    """The stacks of a worker's threads that were serving a job, user frames only."""
    try:
        dump = path.read_text()
    except OSError:
        return "(no stack: the process is gone)"
    internal = (PACKAGE_DIR, os.path.dirname(os.__file__), "<")
    serving = [block for block in dump.split("\n\n") if "in _run_job" in block]
    return "\n".join(
        line
        for block in serving or [dump]
        for line in block.splitlines()
        if not line.strip().removeprefix('File "').startswith(internal)
    )


class NativeExecutor:
    """Runs ranks in warm worker processes started by the real `xmp.spawn`."""

    name = "native"
    sub_worlds = False

    def __init__(self, settings: Settings):
        self._platform = platform()
        self._size = local_devices(self._platform)
        if settings.devices is not None and settings.devices != self._size:
            raise pytest.UsageError(
                f"xlasim: --xla-devices={settings.devices}, but the native backend found "
                f"{self._size} {self._platform} device(s) on this host"
            )
        self._workers: _SpawnedWorkers | None = None
        #: Only the workers' counters: reading this process's would start XLA in it.
        self.counts = SessionCounts(this_process=False)

    @property
    def size(self) -> int:
        return self._size

    def describe(self) -> str:
        return f"{self._platform} via xmp.spawn, warm worker processes"

    def start(self) -> None:
        """Spawn the workers now, before a test can start the runtime in this process."""
        if self._workers is None:
            self._workers = _SpawnedWorkers(self._size)

    def run_ranks(
        self,
        fn: Callable[..., Any],
        args: Sequence[Any],
        kwargs: dict[str, Any],
        *,
        size: int,
        timeout: float,
        tee: bool,
        style: FailureStyle | None = None,
    ) -> list[RankOutcome]:
        """`Executor.run_ranks` in the warm `xmp.spawn` workers, the call pickled to them.

        Args:
            fn: the function every rank calls; it must pickle.
            args: positional arguments, the same for every rank.
            kwargs: keyword arguments, the same for every rank.
            size: must be the slice's size: the native backend has no sub-worlds.
            timeout: seconds to wait for every worker's answer, not counting time a rank
                spends in a debugger; past it the workers are killed and restarted.
            tee: write each rank's output to this process's stdout/stderr once the run ends
                (the workers' output cannot be shown live).
            style: how the workers render failures; None renders as pytest's defaults would.
        """
        if size != self._size:
            raise XlasimError(
                f"the native backend runs every rank of the slice ({self._size}); a world of "
                f"{size} needs the emulated backend"
            )
        job = pack(
            fn,
            args,
            kwargs,
            where="the native backend's ranks live in xmp.spawn's worker processes",
            style=style or FailureStyle.of(None),
        )
        self.start()
        workers = self._workers
        with traces.launch() as traced:
            coverage = rank_coverage.requested(), os.getcwd()  # workers measure as this does
            for conn in workers.conns.values():
                conn.send((size, list(sys.path), job, traced.directory, *coverage))
            outcomes = self._collect(workers, size, timeout)
            traced.failed = any(o.raised for o in outcomes)
        self.counts.add_remote([o.metrics for o in outcomes])
        if tee:  # made in the workers: shown live only now
            for o in outcomes:
                sys.stdout.write(o.stdout)
                sys.stderr.write(o.stderr)
        return outcomes

    def _collect(self, workers: _SpawnedWorkers, size: int, timeout: float) -> list[RankOutcome]:
        """Every rank's outcome, as its worker sent it; the ranks' debugger requests, which
        come on the same connections, are served at this process's terminal meanwhile, and
        the bound stands still while a rank is in a debugger (docs/debugging.md)."""
        replies: dict[int, RankOutcome] = {}
        pending = {conn: rank for rank, conn in workers.conns.items()}
        desk = Desk()
        deadline = debugger_clock.now() + timeout
        try:
            while pending:
                pause = desk.serve() or 1.0
                remaining = deadline - debugger_clock.now()
                if remaining <= 0:
                    self._restart_after(workers, sorted(pending.values()), timeout)
                for conn in wait(list(pending), timeout=min(remaining, pause)):
                    rank = pending[conn]  # type: ignore[index]
                    try:
                        message = conn.recv()  # type: ignore[union-attr]
                    except (EOFError, OSError):
                        died = XlasimError(f"rank {rank}'s worker process died")
                        message = RankOutcome(rank, size, error=died)
                        self._workers = None
                    if isinstance(message, Request):
                        desk.submit(message, conn.send)  # type: ignore[union-attr]
                        continue
                    del pending[conn]  # type: ignore[arg-type]
                    replies[rank] = message
        finally:
            desk.close()
        if self._workers is None:
            workers.kill()
        return [replies[rank] for rank in range(size)]

    def _restart_after(self, workers: _SpawnedWorkers, late: list[int], timeout: float) -> None:
        flushing.request(workers.flush_conns)  # what hung ranks recorded, before the kill
        stacks = workers.stacks()
        workers.kill()
        self._workers = None
        report = "\n".join(
            f"--- rank {rank} (pid {workers.pids[rank]})\n{stacks[rank].rstrip()}"
            for rank in sorted(stacks)
        )
        raise CollectiveTimeoutError(
            f"the run did not finish within {timeout:g} s (ranks {late} never answered); the "
            f"workers were killed and are started again for the next test.\n{report}"
        )

    def close(self, wait: float = 0.0) -> None:
        """Stop the workers (waiting up to `wait` seconds for their processes to end)."""
        if self._workers is not None:
            self._workers.stop(wait)
            self._workers = None
