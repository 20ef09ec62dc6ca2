"""Writing out a process's events on request, while its ranks hang.

A rank's events are held in memory until its stream is flushed (`recorder.py`). Worker processes
whose main thread only serves the launching process (emulated worker processes) answer its
`flush` request there. The native backend's spawned workers and the SPMD worker run their ranks
in the threads that also read their jobs, so when a rank hangs nothing there reads a request:
they serve flushes from a thread of their own, on a connection of its own (`serve`), which the
launching process uses before it kills them (`request`). The thread needs the GIL, which a rank
stuck in Python code or in a native call that released it (a collective waiting on its peers)
leaves to it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection, wait

from . import recorder

#: How long a process gets to write its events out before it is killed (a few thousand lines
#: take milliseconds; this is for a loaded machine).
FLUSH_GRACE_S = 2.0
FLUSH, FLUSHED = "flush", "flushed"


def serve(conn: Connection, also: Callable[[], None] | None = None) -> None:
    """Flush this process's recorder whenever `conn` asks, from a daemon thread, until the
    connection closes.

    Args:
        conn: this process's end of its flush connection (the launching process holds the
            other, for `request`).
        also: what else the process writes out on each request (the SPMD worker: its
            coverage data, `xlasim.ranks.rank_coverage.save`).
    """
    threading.Thread(
        target=_answer, args=(conn, also), name="xlasim-event-flush", daemon=True
    ).start()


def _answer(conn: Connection, also: Callable[[], None] | None) -> None:
    with contextlib.suppress(EOFError, OSError):
        while conn.recv() == FLUSH:
            tracer = recorder.current()
            if tracer is not None:
                tracer.flush()
            if also is not None:
                also()
            conn.send(FLUSHED)


def request(conns: list[Connection], grace: float = FLUSH_GRACE_S) -> None:
    """Have the processes behind `conns` write their events out; wait until each says it did,
    at most `grace` seconds in all (a process already gone is skipped).

    Args:
        conns: the launching process's ends of the processes' flush connections.
        grace: the bound on the wait, in seconds.
    """
    asked = []
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.send(FLUSH)
            asked.append(conn)
    deadline = time.monotonic() + grace
    while asked and (remaining := deadline - time.monotonic()) > 0:
        for conn in wait(asked, timeout=remaining):
            asked.remove(conn)
            with contextlib.suppress(EOFError, OSError):
                conn.recv()
