"""Ctrl-C reaches the main thread while it waits for a line at the terminal.

The kernel hands a process's SIGINT to any of its threads that does not block it, and a process
with torch_xla loaded has dozens. Python's handler, run in that thread, only marks the signal;
the main thread raises `KeyboardInterrupt` when it next looks at its marks, which it does while
waiting for a line only when its own `select()` is interrupted. So a rank's debugger prompt
ignored Ctrl-C now and then (CI saw it once in a few dozen sessions; sending SIGINT to one of
the process's other threads shows it every time): the session hung at the prompt.

While the terminal reads a line (`relayed()`), the signals' wake-up file descriptor, which
Python's handler writes to from whichever thread ran it, is watched by a thread of ours; on
SIGINT it sends the main thread `POKE`, a signal whose handler does nothing: the main thread's
wait is interrupted, and Python raises the `KeyboardInterrupt` the SIGINT left.
"""

from __future__ import annotations

import os
import select
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress

#: The signal that interrupts the main thread's wait (a real-time one: nothing else sends it).
POKE = signal.SIGRTMAX - 3
#: What the relay writes to its own descriptor to end its watcher (no signal has number 0).
WAKE = b"\0"


@contextmanager
def relayed() -> Iterator[None]:
    """Ctrl-C interrupts the main thread's waits for the duration (elsewhere: nothing changes).

    Ctrl-C still raises where the main thread is, as Python's own handler does; this only makes
    it raise while the main thread waits in native code for input.
    """
    if threading.current_thread() is not threading.main_thread() or not callable(
        signal.getsignal(signal.SIGINT)
    ):
        yield
        return
    signal.signal(POKE, _ignore)  # stays: a late poke must not find the default (terminate)
    reader, writer = os.pipe()
    os.set_blocking(writer, False)
    previous = signal.set_wakeup_fd(writer, warn_on_full_buffer=False)
    done = threading.Event()
    watcher = threading.Thread(
        target=_watch,
        args=(reader, previous, done, threading.main_thread().ident),
        name="xlasim-ctrl-c-relay",
        daemon=True,
    )
    watcher.start()
    try:
        yield
    finally:
        signal.set_wakeup_fd(previous, warn_on_full_buffer=False)
        done.set()
        with suppress(BlockingIOError):
            os.write(writer, WAKE)  # the watcher ends now, not at its next poll
        watcher.join()
        os.close(reader)
        os.close(writer)


def _watch(reader: int, previous: int, done: threading.Event, main: int) -> None:
    """Poke the main thread on every SIGINT until `done`; other signals' marks go on to the
    wake-up descriptor that was set before (-1: none)."""
    while not done.is_set():
        ready, _, _ = select.select([reader], [], [], 0.1)
        if not ready:
            continue
        marks = os.read(reader, 512).replace(WAKE, b"")
        if previous >= 0 and marks:
            with suppress(OSError):
                os.write(previous, marks)
        if signal.SIGINT in marks and not done.is_set():
            signal.pthread_kill(main, POKE)


def _ignore(signum: int, frame: object) -> None:
    """`POKE`'s handler: the interruption is the point."""
