"""What runs inside the native backend's worker processes (started by the real `xmp.spawn`).

Each spawned rank connects back to the pytest process and serves jobs until told to stop, so
the workers (and their XLA runtime and compilation cache) stay warm across tests. A job is a
`remote.RemoteJob`: the worker puts the parent's `sys.path` in place, runs it (`rank_side.run_job`:
test modules imported the way pytest did, from their paths, asserts rewritten) and replies
with the rank's `RankOutcome`, made by the core as for emulated ranks: result or error and
traceback, output, failure rendered as pytest would have, and the XLA counters it added. A rank
stopped in a debugger asks the pytest process's terminal over the same connection, while its
job runs (`DebugChannel`; docs/debugging.md).
"""

from __future__ import annotations

import faulthandler
import functools
import os
import signal
import sys
from multiprocessing.connection import Client, Connection
from pathlib import Path

from ...events import flushing, hooks
from ...ranks import rank_coverage
from ...reports import rank_debugger, rank_outcome, rank_output, xla_counters
from ...reports.debugger_desk import Request
from ...reports.rank_outcome import Collect, RankOutcome
from ..remote import jobs as remote
from ..remote import rank_side

STACK_SIGNAL = signal.SIGUSR1
#: What a process's flush connection says first (a rank's says its index and pid).
FLUSH_CHANNEL = "flush channel"
_stacks_file = None


def _setup_process(address: str, authkey: bytes, stack_dir: str) -> None:
    """Once per process, before its ranks connect: stacks on request (a signal), recorded
    events written out on request (its own connection: a hung rank's thread reads nothing),
    and output captured per serving thread."""
    global _stacks_file
    if _stacks_file is None:
        _stacks_file = open(Path(stack_dir) / f"{os.getpid()}.txt", "w")  # noqa: SIM115 (lives as long as the process)
        faulthandler.register(STACK_SIGNAL, file=_stacks_file, all_threads=True)
        flush_conn = Client(address, authkey=authkey)
        flush_conn.send((FLUSH_CHANNEL, os.getpid()))
        flushing.serve(flush_conn)
    rank_output.install()
    rank_debugger.install()  # breakpoints stop a rank at the pytest process's terminal


class DebugChannel:
    """A rank's debugger asks the pytest process's terminal over the rank's connection
    (the pytest process reads it while it waits for the job's outcome)."""

    def __init__(self, conn: Connection, rank: int, size: int):
        self._conn, self.rank, self.size = conn, rank, size

    def ask(self, request: Request) -> str | None:
        self._conn.send(request)
        return self._conn.recv()


def _run_job(
    conn: Connection,
    index: int,
    size: int,
    sys_path: list[str],
    job: remote.RemoteJob,
    trace: Path | None,
    coverage: str | None,
    cwd: str,
) -> RankOutcome:
    before = xla_counters.counts()
    with rank_side.process_lock:  # a worker process serves one rank per device thread on CPU
        sys.path[:] = sys_path
        hooks.follow(str(trace) if trace is not None else None)
        rank_coverage.follow(coverage, cwd)  # measured as the pytest process is, if it is
        rank_coverage.trace_this_thread()  # a device thread that started before it
    collect = Collect(output=True, render=functools.partial(rank_side.render_failure, job.style))
    rank_debugger.bind(DebugChannel(conn, index, size))
    try:
        ended = rank_outcome.call(index, size, rank_side.run_job, (job,), {}, collect)
    finally:
        rank_debugger.bind(None)
    ended.metrics = xla_counters.growth(before)
    return ended.portable()


def serve(index: int, address: str, authkey: bytes, stack_dir: str) -> None:
    """The function `xmp.spawn` runs on every rank: serve jobs until the parent says stop.

    Args:
        index: this rank's index, as `xmp.spawn` passes it (0..size-1).
        address: the pytest process's listener (a Unix socket path) to connect back to.
        authkey: the listener's secret, proving the connection comes from its own workers.
        stack_dir: directory where this process writes its threads' stacks when signalled
            (one file per pid), read by the parent when a run hangs.
    """
    with rank_side.process_lock:
        _setup_process(address, authkey, stack_dir)
    with Client(address, authkey=authkey) as conn:
        conn.send((index, os.getpid()))
        while (job := conn.recv()) is not None:
            conn.send(_run_job(conn, index, *job))
