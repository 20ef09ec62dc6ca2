"""Per-rank output capture.

pytest captures a test's output as one stream, but emulated ranks are threads of one process,
so their prints would interleave into a single "Captured stdout". While a world runs, the
plugin swaps `sys.stdout`/`sys.stderr` for a router that sends each write made by a rank
thread (known through `xlasim.current()`) to that rank's buffer, and anything else to the
stream pytest installed. Native worker processes use the same router, keyed by their serving
thread. Output written below Python (C++ logs to fd 1/2) is not routed.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from ..context import current


class Router(io.TextIOBase):
    """A text stream that sends each write to `target()`, or to `fallback` when that is None."""

    def __init__(self, fallback: TextIO, target: Callable[[], TextIO | None], tee: bool = False):
        self._fallback = fallback
        self._target = target
        self._tee = tee

    def write(self, text: str) -> int:
        target = self._target()
        if target is None:
            return self._fallback.write(text)
        target.write(text)
        if self._tee:
            self._fallback.write(text)
        return len(text)

    def flush(self) -> None:
        self._fallback.flush()

    def writable(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:  # encoding, isatty, fileno... of the real stream
        return getattr(self._fallback, name)


@contextmanager
def per_rank_output(size: int, tee: bool = False) -> Iterator[tuple[list[io.StringIO], ...]]:
    """Route rank threads' `sys.stdout`/`sys.stderr` to per-rank buffers while inside.

    `tee` also passes the writes through (for `pytest -s`, where output is expected live).
    """
    out = [io.StringIO() for _ in range(size)]
    err = [io.StringIO() for _ in range(size)]

    def rank_buffer(buffers: list[io.StringIO]) -> Callable[[], TextIO | None]:
        def target() -> TextIO | None:
            ctx = current()
            return buffers[ctx.rank] if ctx is not None and ctx.rank < size else None

        return target

    saved = sys.stdout, sys.stderr
    sys.stdout = Router(saved[0], rank_buffer(out), tee)  # type: ignore[assignment]
    sys.stderr = Router(saved[1], rank_buffer(err), tee)  # type: ignore[assignment]
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved
