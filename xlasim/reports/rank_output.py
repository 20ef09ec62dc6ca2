"""Each rank's own stdout and stderr, captured while its function runs.

Ranks that share a process would interleave their prints into one stream. While a rank
captures, `sys.stdout`/`sys.stderr` writes made by its thread (or by a thread acting for it,
such as autograd's backward thread, known through `xlasim.current()`) go to that rank's
buffers; any other write goes to the stream that was there. Output written below Python
(C++ logs to fd 1/2) is not captured.

The launching process routes only while a run is in progress (`routed`), on top of whatever
stream is current then (pytest swaps its own per test); worker processes route for their whole
life (`install`), since nothing else writes there.

What a rank passes through to the stream underneath (`tee`) goes there a whole line at a time:
`print` writes each piece of a line and then its newline, and ranks writing to one stream (the
threads mode) or to one terminal (worker processes, whose streams are unbuffered there) would
cut each other's lines ("HWHW TPU"), where a TPU VM's processes each flush a line whole. A
rank's unfinished line waits for its newline, for an explicit flush (a progress line), or for
the rank's end.
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
#: A running rank's buffers (None where its output is not kept) and whether its output also
#: passes to the stream underneath: (stdout, stderr, tee).
Target = tuple[io.StringIO | None, io.StringIO | None, bool]
#: Running ranks' targets, by thread and by (run, rank).
_by_thread: dict[int, Target] = {}
_by_rank: dict[tuple[int, int], Target] = {}
_installed = False


class Router(io.TextIOBase):
    """A text stream that sends each write to the writing rank's buffer, else to `fallback`;
    what a rank tees to `fallback` goes whole lines at a time (the module's docstring)."""

    def __init__(self, fallback: TextIO, stream: int):
        self._fallback = fallback
        self._stream = stream  # 0: stdout, 1: stderr
        #: Each teeing rank's line so far, by its buffers' identity, until its newline.
        self._unfinished: dict[int, str] = {}

    def write(self, text: str) -> int:
        target = _target()
        if target is None:
            return self._fallback.write(text)
        kept = target[self._stream]
        if kept is not None:
            kept.write(text)
        if target[2]:
            self._tee(id(target), text)
        return len(text)

    def _tee(self, key: int, text: str) -> None:
        with _lock:
            text = self._unfinished.pop(key, "") + text
            cut = text.rfind("\n") + 1
            if cut < len(text):
                self._unfinished[key] = text[cut:]
        if cut:
            self._fallback.write(text[:cut])

    def flush(self) -> None:
        """Flush the stream underneath, first with the flushing rank's unfinished line (a
        progress line flushed on purpose goes out as it is)."""
        target = _target()
        if target is not None:
            self.finish(target)
        self._fallback.flush()

    def finish(self, target: Target) -> None:
        """Write out the unfinished line of the rank whose buffers are `target`."""
        with _lock:
            rest = self._unfinished.pop(id(target), "")
        if rest:
            self._fallback.write(rest)

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno... of the real stream
        return getattr(self._fallback, name)


def _target() -> Target | None:
    found = _by_thread.get(threading.get_ident())
    if found is None:
        ctx = rank_context.current()
        if ctx is not None:
            found = _by_rank.get((id(ctx.run), ctx.rank))
    return found


@contextmanager
def captured(run: Any, rank: int, tee: bool, keep: bool = True) -> Iterator[Target]:
    """Route what the calling thread (playing `rank` of `run`) writes while inside: kept in
    the rank's buffers (`keep`), passed through to the stream underneath whole lines at a time
    (`tee`), or both.

    Args:
        run: the run the rank belongs to (ranks of several runs may share a process).
        rank: the rank's number in it.
        tee: pass its output through to the stream underneath.
        keep: keep its output in buffers (the yielded target's first two items, else None).
    """
    buffers = (io.StringIO(), io.StringIO(), tee) if keep else (None, None, tee)
    with _lock:
        _by_thread[threading.get_ident()] = buffers
        _by_rank[(id(run), rank)] = buffers
    try:
        yield buffers
    finally:
        with _lock:
            _by_thread.pop(threading.get_ident(), None)
            _by_rank.pop((id(run), rank), None)
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, Router):
                stream.finish(buffers)


class _Diverted(io.StringIO):
    """A capture buffer whose writes go to a debugger session instead (`diverted`)."""

    def __init__(self, write: Callable[[str], object]):
        super().__init__()
        self._send = write

    def write(self, text: str) -> int:
        self._send(text)
        return len(text)


@contextmanager
def diverted(write: Callable[[str], object]) -> Iterator[None]:
    """While inside, what the calling thread's rank writes goes to `write` (its debugger
    session, at the user's terminal), as pytest suspends its capture for a debugger; what
    it wrote before stays captured. Nothing changes for a rank whose output is not routed."""
    key = threading.get_ident()
    with _lock:
        kept = _by_thread.get(key)
        ranks = [k for k, v in _by_rank.items() if v is kept]
        if kept is not None:
            stand_in = (_Diverted(write), _Diverted(write), False)
            _by_thread[key] = stand_in
            _by_rank.update(dict.fromkeys(ranks, stand_in))
    try:
        yield
    finally:
        if kept is not None:
            with _lock:
                if _by_thread.get(key) is not None:
                    _by_thread[key] = kept
                for rank in ranks:
                    if rank in _by_rank:
                        _by_rank[rank] = kept


@contextmanager
def redirected(stdout: TextIO, stderr: TextIO) -> Iterator[Callable[[], Any]]:
    """While inside, what the calling rank writes goes to `stdout` and `stderr` instead of its
    captured output (pytest's capture fixtures, made on a rank). Yields a function that
    returns a context manager inside which the rank's writes go where they went before (its
    captured output: `capsys.disabled()`).

    Raises `RuntimeError` when the calling thread does not capture as a rank.

    Args:
        stdout: where the rank's writes to `sys.stdout` go while inside.
        stderr: where its writes to `sys.stderr` go while inside.
    """
    ident = threading.get_ident()
    with _lock:
        before = _by_thread.get(ident)
        if before is None:
            raise RuntimeError("redirected() is for a rank whose output is captured")
        key = next(k for k, v in _by_rank.items() if v is before)
    target = (stdout, stderr, False)

    @contextmanager
    def put(buffers: Any) -> Iterator[None]:
        with _lock:
            saved = _by_thread[ident]
            _by_thread[ident] = _by_rank[key] = buffers
        try:
            yield
        finally:
            with _lock:
                _by_thread[ident] = _by_rank[key] = saved

    with put(target):
        yield lambda: put(before)


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
