"""A rank's debugger: pdb where the rank's frames are, at the user's terminal.

A rank runs in a thread of the launching process or of a worker process, and only the
launching process owns the terminal. So a rank's pdb keeps its frames (it runs in the rank's
thread, like any pdb) and reads and writes through a `Channel`: its `Run`'s `debug` (a thread's
run, or a worker's link to it) or, in the native backend's workers, their connection to the
pytest process. There, the launching thread serves it at the terminal (`debugger_desk.py`).

What stops a rank: `breakpoint()` and `pdb.set_trace()` (`install`, `hooks`),
`torch.distributed.breakpoint(rank=k)` (its `_DistributedPdb`), a failure under
`pytest --pdb` (`post_mortem`), a test run under `pytest --trace` (`runcall`). The prompt
names the rank, `(Pdb rank 3/8)`; stepping never stops in xlasim's own frames; `interact`
reads and writes through the same channel; what the rank prints while it is stopped goes to
the terminal with the debugger's output (`rank_output.diverted`). A session ends at `c` or `q`
(or when the rank's call returns while it is stepping, `leave`).
"""

from __future__ import annotations

import bdb
import code
import os
import pdb
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, Protocol

from ..base import rank_context
from . import rank_output
from .debugger_desk import (
    CONTINUE,
    DECLINED,
    EOF,
    POST_MORTEM,
    QUIT,
    RUNCALL,
    SET_TRACE,
    Request,
)
from .frames import user_traceback

#: Modules stepping does not stop in: the emulator's own frames between the user's.
SKIP = ["xlasim.*"]


class Channel(Protocol):
    """How a rank's debugger reaches the terminal."""

    rank: int
    size: int

    def ask(self, request: Request) -> str | None:
        """Send `request`; the reply: a line, `EOF`, `DECLINED`, or None (nothing to read)."""


class RunChannel:
    """Through the rank's run (`Run.debug` in the launching process; a worker's `RunClient`
    forwards it over the rank's link)."""

    def __init__(self, run: Any, rank: int):
        self.run, self.rank, self.size = run, rank, run.size

    def ask(self, request: Request) -> str | None:
        return self.run.debug(self.rank, request)


_local = threading.local()


def bind(channel: Channel | None) -> None:
    """The calling thread serves a rank that has no emulated run (the native backend's
    workers): its debugger goes through `channel` (None: no longer)."""
    _local.channel = channel


def channel() -> Channel | None:
    """The calling thread's way to the terminal, when it plays a rank."""
    bound = getattr(_local, "channel", None)
    if bound is not None:
        return bound
    context = rank_context.current()
    if context is None or not hasattr(context.run, "debug"):
        return None
    return RunChannel(context.run, context.rank)


class Declined(Exception):
    """The desk serves another rank's post-mortem: this one is not shown."""


class _Session:
    """One rank's debugger session: what it printed since it last asked the terminal."""

    def __init__(self, to: Channel, kind: str, preamble: str = ""):
        self.channel, self.kind, self.preamble = to, kind, preamble
        self.encoding = "utf-8"
        self._texts: list[str] = []
        self._texts_lock = threading.Lock()  # the rank's helper threads may print too
        self._diversion: ExitStack | None = None
        self.open = True

    @property
    def label(self) -> str:
        return f"rank {self.channel.rank}/{self.channel.size}"

    def write(self, text: str) -> int:
        with self._texts_lock:
            self._texts.append(text)
        return len(text)

    def flush(self) -> None:
        """Output goes with the next request."""

    def isatty(self) -> bool:
        return False

    def readline(self) -> str:
        """A line from the terminal; what is pending is shown first, its last line as the
        prompt."""
        output, _, prompt = self._take().rpartition("\n")
        reply = self._ask(output + "\n" if output else "", prompt=prompt)
        if reply == DECLINED:
            raise Declined
        return reply or EOF

    def divert(self) -> None:
        """From now until `end`, what the rank prints goes to the terminal too."""
        if self._diversion is None:
            self._diversion = ExitStack()
            self._diversion.enter_context(rank_output.diverted(self.write))

    def end(self, how: str) -> None:
        """The session is over (`c`, `q`, or the rank's call returned)."""
        if self._diversion is not None:
            self._diversion.close()
            self._diversion = None
        if self.open:
            self.open = False
            self._ask(self._take(), end=how)

    def _take(self) -> str:
        with self._texts_lock:
            text, self._texts = "".join(self._texts), []
        return text

    def _ask(self, output: str, prompt: str | None = None, end: str | None = None) -> Any:
        request = Request(
            self.channel.rank, self.channel.size, self.kind, output, prompt, end, self.preamble
        )
        self.preamble = ""
        return self.channel.ask(request)


class _Input:
    """pdb's stdin: lines from the terminal."""

    def __init__(self, session: _Session):
        self._session = session

    def readline(self) -> str:
        return self._session.readline()


class RankPdb(pdb.Pdb):
    """pdb of one rank: its prompt names the rank, its terminal is the session's."""

    def __init__(self, session: _Session):
        super().__init__(stdin=_Input(session), stdout=session, skip=SKIP, nosigint=True)  # type: ignore[arg-type]
        self.prompt = f"(Pdb {session.label}) "
        self.session = session
        self.ending: str | None = None

    def set_continue(self) -> None:
        super().set_continue()
        self.ending = CONTINUE

    def set_quit(self) -> None:
        super().set_quit()
        self.ending = QUIT

    def interaction(self, frame: Any, traceback: Any) -> None:
        """pdb's prompt loop, as the rank's session: the session takes the thread (a breakpoint
        hit while stepping joins it) and ends when the user continues or quits (a post-mortem's
        end is its caller's to say).

        Args:
            frame: the frame stopped in, as pdb passes it (None for a post-mortem).
            traceback: the exception's traceback for a post-mortem, else None.
        """
        _local.session = self.session
        self.ending = None
        self.session.open = True  # a breakpoint set in an ended session opens it again
        self.session.divert()
        super().interaction(frame, traceback)
        if self.ending is not None and self.session.kind != POST_MORTEM:
            self.session.end(self.ending)
            _local.session = None

    def do_interact(self, arg: str) -> None:
        """interact
        Start an interactive interpreter whose global namespace contains all the (global and
        local) names found in the current scope; it reads and writes at the rank's terminal."""
        namespace = {**self.curframe.f_globals, **self.curframe_locals}
        _Console(self.session, namespace).interact("*interactive*")


class _Console(code.InteractiveConsole):
    """`interact` at the rank's terminal."""

    def __init__(self, session: _Session, namespace: dict[str, Any]):
        super().__init__(namespace)
        self._session = session

    def raw_input(self, prompt: str = "") -> str:
        self._session.write(prompt)
        line = self._session.readline()
        if line == EOF:
            raise EOFError
        return line.rstrip("\n")

    def write(self, data: str) -> None:
        self._session.write(data)


def _session(to: Channel, kind: str) -> _Session:
    """The thread's open session (a breakpoint hit while stepping joins it), or a new one."""
    current = getattr(_local, "session", None)
    if current is not None and current.open and current.channel.rank == to.rank:
        return current
    return _Session(to, kind)


def set_trace(frame: Any, to: Channel, header: str | None = None) -> None:
    """Stop the rank at `frame` (the caller of `breakpoint()` or `pdb.set_trace()`).

    Args:
        frame: the frame to stop in.
        to: how the rank's debugger reaches the terminal.
        header: a line printed before the first prompt (`pdb.set_trace(header=...)`); None:
            none.
    """
    debugger = RankPdb(_session(to, SET_TRACE))
    if header is not None:
        debugger.message(header)
    debugger.set_trace(frame)


def post_mortem(error: BaseException) -> None:
    """pdb at the frame `error` was raised in, the rank's frames alive, unless another rank's
    post-mortem was served first (or the thread plays no rank)."""
    to = channel()
    if to is None or error.__traceback__ is None:
        return
    session = _Session(to, POST_MORTEM, preamble=user_traceback(error))
    debugger = RankPdb(session)
    debugger.reset()
    try:
        debugger.interaction(None, error.__traceback__)
    except Declined:
        session.open = False
    finally:
        _local.session = None
        session.end(debugger.ending or CONTINUE)


def runcall(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call `fn` under pdb, stopped at its first line (`pytest --trace`); outside a rank,
    plainly.

    Args:
        fn: the test function (or what runs it) to step through.
        args: its positional arguments.
        kwargs: its keyword arguments.
    """
    to = channel()
    if to is None:
        return fn(*args, **kwargs)
    debugger = RankPdb(_Session(to, RUNCALL))
    try:
        return debugger.runcall(fn, *args, **kwargs)
    finally:
        leave()
        if debugger.ending == QUIT:
            raise bdb.BdbQuit  # runcall swallows it: the rank stops as pdb's `q` stops a test


def leave() -> None:
    """The rank's call is over: a session still open (the rank was stepping) ends, and the
    thread stops being traced. Cheap when no debugger ran (every rank's call ends here)."""
    session = getattr(_local, "session", None)
    if session is None:
        return
    _local.session = None
    sys.settrace(None)
    frame = sys._getframe(1)
    while frame is not None:  # as pdb's `continue` does: no frame keeps its trace function
        frame.f_trace = None
        frame = frame.f_back
    session.end(CONTINUE)


# ---------------------------------------------------------------------- what stops a rank


def _set_trace_on_rank(previous: Callable[..., Any]) -> Callable[..., Any]:
    def set_trace_on_rank(*, header: str | None = None) -> None:
        to = channel()
        if to is None:  # not a rank: as before (one frame deeper)
            return previous(header=header)
        set_trace(sys._getframe(1), to, header)
        return None

    set_trace_on_rank.__wrapped__ = previous  # type: ignore[attr-defined]
    return set_trace_on_rank


def _breakpointhook_on_rank(previous: Callable[..., Any]) -> Callable[..., Any]:
    def breakpointhook(*args: Any, **kwargs: Any) -> Any:
        to = channel()
        wanted = os.environ.get("PYTHONBREAKPOINT", "")
        if to is None or wanted not in ("", "pdb.set_trace"):  # not a rank, or another hook
            return previous(*args, **kwargs)
        set_trace(sys._getframe(1), to)
        return None

    breakpointhook.__wrapped__ = previous  # type: ignore[attr-defined]
    return breakpointhook


def _distributed_pdb_on_rank(previous: Callable[[], Any]) -> Callable[[], Any]:
    def distributed_pdb() -> Any:
        to = channel()
        return previous() if to is None else RankPdb(_session(to, SET_TRACE))

    distributed_pdb.__wrapped__ = previous  # type: ignore[attr-defined]
    return distributed_pdb


#: (owner, attribute, wrapper factory): where code looks up what stops it.
def _targets() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    found: list[tuple[Any, str, Callable[[Any], Any]]] = [
        (pdb, "set_trace", _set_trace_on_rank),
        (sys, "breakpointhook", _breakpointhook_on_rank),
    ]
    distributed = sys.modules.get("torch.distributed")
    if distributed is not None and hasattr(distributed, "_DistributedPdb"):
        found.append((distributed, "_DistributedPdb", _distributed_pdb_on_rank))
    return found


def _is_ours(value: Any) -> bool:
    return getattr(value, "__module__", None) == __name__


def install() -> None:
    """Stop ranks of this process at their breakpoints (a worker process: once, for good)."""
    for owner, name, wrap in _targets():
        current = getattr(owner, name)
        if not _is_ours(current):
            setattr(owner, name, wrap(current))


_hooks_lock = threading.Lock()
_hooks_users = 0
_hooks_saved: list[tuple[Any, str, Any]] = []


@contextmanager
def hooks() -> Iterator[None]:
    """While inside, ranks that are threads of this process stop at their breakpoints; other
    threads keep what they had (pytest's own debugger), as before and after."""
    global _hooks_users
    with _hooks_lock:
        if _hooks_users == 0:
            _hooks_saved[:] = [(owner, name, getattr(owner, name)) for owner, name, _ in _targets()]
            install()
        _hooks_users += 1
    try:
        yield
    finally:
        with _hooks_lock:
            _hooks_users -= 1
            if _hooks_users == 0:
                for owner, name, value in _hooks_saved:
                    setattr(owner, name, value)
                _hooks_saved.clear()
