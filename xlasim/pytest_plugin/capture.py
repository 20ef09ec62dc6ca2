"""Per-rank output capture for rank threads.

pytest captures a test's output as one stream, but emulated ranks are threads of one process,
so their prints would interleave into a single "Captured stdout". While a world runs, the
plugin swaps `sys.stdout`/`sys.stderr` for a router that sends each write made by a rank
thread (known through `xlasim.current()`) to that rank's buffer, and anything else to the
stream pytest installed. Output written below Python (C++ logs to fd 1/2) is not routed.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from ..context import current


class _RankRouter(io.TextIOBase):
    """A text stream that routes each write to the buffer of the writing rank."""

    def __init__(self, fallback: TextIO, buffers: list[io.StringIO], tee: bool):
        self._fallback = fallback
        self._buffers = buffers
        self._tee = tee

    def write(self, text: str) -> int:
        ctx = current()
        if ctx is None or ctx.rank >= len(self._buffers):
            return self._fallback.write(text)
        self._buffers[ctx.rank].write(text)
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
    saved = sys.stdout, sys.stderr
    sys.stdout = _RankRouter(saved[0], out, tee)  # type: ignore[assignment]
    sys.stderr = _RankRouter(saved[1], err, tee)  # type: ignore[assignment]
    try:
        yield out, err
    finally:
        sys.stdout, sys.stderr = saved
