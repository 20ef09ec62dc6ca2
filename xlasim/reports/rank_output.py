"""Each rank's own stdout and stderr, captured while its function runs.

Ranks that share a process would interleave their prints into one stream. While a rank
captures, `sys.stdout`/`sys.stderr` writes made by its thread (or by a thread acting for it,
such as autograd's backward thread, known through `xlasim.current()`) go to that rank's
buffers; any other write goes to the stream that was there. Output written below Python
(C++ logs to fd 1/2) is not captured.

The launching process routes only while a run is in progress (`routed`), on top of whatever
stream is current then (pytest swaps its own per test); worker processes route for their whole
life (`install`), since nothing else writes there.
"""

from __future__ import annotations

import io
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from ..base import rank_context

_lock = threading.Lock()
#: Capturing ranks' buffers, by thread and by (run, rank): [stdout, stderr, tee].
_by_thread: dict[int, tuple[io.StringIO, io.StringIO, bool]] = {}
_by_rank: dict[tuple[int, int], tuple[io.StringIO, io.StringIO, bool]] = {}
_installed = False


class Router(io.TextIOBase):
    """A text stream that sends each write to the writing rank's buffer, else to `fallback`."""

    def __init__(self, fallback: TextIO, stream: int):
        self._fallback = fallback
        self._stream = stream  # 0: stdout, 1: stderr

    def write(self, text: str) -> int:
        target = _target()
        if target is None:
            return self._fallback.write(text)
        target[self._stream].write(text)
        if target[2]:
            self._fallback.write(text)
        return len(text)

    def flush(self) -> None:
        self._fallback.flush()

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno... of the real stream
        return getattr(self._fallback, name)


def _target() -> tuple[io.StringIO, io.StringIO, bool] | None:
    found = _by_thread.get(threading.get_ident())
    if found is None:
        ctx = rank_context.current()
        if ctx is not None:
            found = _by_rank.get((id(ctx.run), ctx.rank))
    return found


@contextmanager
def captured(run: Any, rank: int, tee: bool) -> Iterator[tuple[io.StringIO, io.StringIO]]:
    """Capture what the calling thread (playing `rank` of `run`) writes while inside; `tee`
    also passes it through to the stream underneath."""
    buffers = (io.StringIO(), io.StringIO(), tee)
    with _lock:
        _by_thread[threading.get_ident()] = buffers
        _by_rank[(id(run), rank)] = buffers
    try:
        yield buffers[0], buffers[1]
    finally:
        with _lock:
            _by_thread.pop(threading.get_ident(), None)
            _by_rank.pop((id(run), rank), None)


def _swap(make: Callable[[TextIO, int], TextIO]) -> tuple[TextIO, TextIO]:
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = make(saved[0], 0), make(saved[1], 1)
    return saved


@contextmanager
def routed() -> Iterator[None]:
    """Route capturing ranks' writes while inside (the launching process, around one run)."""
    saved = _swap(Router)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def install() -> None:
    """Route capturing ranks' writes from now on (once per worker process)."""
    global _installed
    with _lock:
        if not _installed:
            _swap(Router)
            _installed = True
