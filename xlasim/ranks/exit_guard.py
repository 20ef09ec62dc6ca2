"""`os._exit` and `os.abort` called by a rank that is a thread of the launching process.

On a TPU VM a rank that calls `os._exit(7)` ends its own process and the slice reports the lost
worker. In the threads mode (`processes=1`) every rank is a thread of the launching process, so
the same call would end every rank and the caller at once, with no report naming the rank. The
guard turns the call, made from a rank thread of the process that installed it, into a
`RankExitError` raised in that rank; everywhere else (the caller's own thread, a child forked by
a rank, worker processes) the real function runs. Aborts from native code (a C++ `terminate`, a
fatal signal) cannot be intercepted: docs/faults.md lists them as a limitation.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from ..base import rank_context
from ..base.errors import RankExitError

_lock = threading.Lock()
_installed_in: int | None = None


def guard() -> None:
    """Install the guard in this process (once; idempotent)."""
    global _installed_in
    with _lock:
        if _installed_in == os.getpid():
            return
        _installed_in = os.getpid()
        os._exit = _guarded(os._exit, "os._exit", _installed_in)
        os.abort = _guarded(os.abort, "os.abort", _installed_in)


def _guarded(real: Callable[..., NoReturn], name: str, pid: int) -> Callable[..., Any]:
    def exit_or_raise(*args: Any) -> NoReturn:
        rank = rank_context.current()
        if rank is None or os.getpid() != pid:
            real(*args)
        status = f"({args[0]!r})" if args else "()"
        raise RankExitError(
            f"rank {rank.rank} called {name}{status}: in the threads mode (processes=1) every "
            "rank is a thread of this process, so it would end every rank and the caller with "
            "no report; raised in the rank instead. On a TPU VM it ends that rank's process "
            "(run with one process per core, the default, to emulate that)."
        )

    exit_or_raise.__wrapped__ = real  # type: ignore[attr-defined]
    exit_or_raise.__name__ = real.__name__
    return exit_or_raise
