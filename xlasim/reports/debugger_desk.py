"""Ranks' debugger sessions, served one at a time at the user's terminal.

A rank that stops in pdb (a `breakpoint()`, `pdb.set_trace()`, `torch.distributed.breakpoint`,
a post-mortem under `pytest --pdb`) runs its debugger where its frames are: in its thread, or
in a worker process whose stdin is not the user's. Its pdb reads and writes through the rank's
link to the launching process (`rank_debugger.py` is the rank's end); there, the thread that
launched the ranks, which owns the terminal and receives Ctrl-C, serves the requests through a
`Desk`: one rank's session has the terminal at a time, each prompt names its rank, and the
others wait their turn. A session keeps the terminal while its rank steps through code, for up
to `GRACE_S` between prompts when another rank is waiting: a step that waits for that rank (a
collective) would otherwise never end.

While any session is open or asked for, the ranks' clocks stand still (`debugger_clock`): no
collective timeout, deadlock report or bound of the run fires because a person is reading a
rank's locals. Under `pytest --pdb` only the first rank that fails gets a post-mortem; the
others are declined (their failures are in the report). Ctrl-C at a prompt ends the run: every
session is answered with end-of-file, and the serving thread raises what the terminal says.

How the terminal is shown is a `Terminal`: `PlainTerminal` (stdin and stdout of this
process: `xlasim run`), or the pytest plugin's, which suspends pytest's capture as pytest's own
debugger does (`xlasim/pytest_plugin/per_rank/debugging.py`).
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol

from ..base import debugger_clock
from . import ctrl_c_relay
from .hang_report import rank_span

#: How long a session stepping through code keeps the terminal while another rank waits.
GRACE_S = 1.0
#: How a session ends (`Request.end`).
CONTINUE, QUIT = "continue", "quit"
#: The answer to a line asked for when the terminal has no more (Ctrl-D, or the run is over).
EOF = ""
#: The answer to a post-mortem asked for after another rank's (a line is never NUL).
DECLINED = "\x00declined"
#: The kinds of session.
SET_TRACE, POST_MORTEM, RUNCALL = "set_trace", "post_mortem", "runcall"


@dataclass(frozen=True)
class Request:
    """What a rank's debugger asks of the terminal: show `output`, then read a line after
    `prompt`, or end the session (`end`). The first request of a post-mortem carries the
    failure's traceback (`preamble`), shown before the session's header."""

    rank: int
    size: int
    kind: str
    output: str = ""
    prompt: str | None = None
    end: str | None = None
    preamble: str = ""

    @property
    def label(self) -> str:
        return f"rank {self.rank}/{self.size}"


class Terminal(Protocol):
    """Where sessions are shown and lines are read (the serving thread calls it)."""

    def opened(self, request: Request, again: bool) -> None:
        """A rank's session takes the terminal.

        Args:
            request: the session's first request at the terminal (whose rank, which kind).
            again: whether this session had the terminal before and gave it to another rank.
        """

    def write(self, text: str) -> None:
        """Show what the rank's debugger printed."""

    def readline(self, prompt: str) -> str:
        """A line typed after `prompt`, with its newline; `EOF` at end-of-file. Ctrl-C raises
        `KeyboardInterrupt`."""

    def closed(self, request: Request, note: str, last: bool) -> None:
        """The session ended (`request.end`). May raise what ends the run (pytest's `q` ends
        the session).

        Args:
            request: the rank's last request, whose `end` says how the session ended.
            note: names the ranks whose post-mortems were declined meanwhile; empty if none.
            last: whether no other rank is stopped in a debugger now.
        """

    def idle(self) -> None:
        """No session is open or asked for any more."""

    def interrupted(self, request: Request) -> BaseException:
        """What the serving thread raises after Ctrl-C at `request`'s prompt."""


class PlainTerminal:
    """This process's stdin and stdout, with line editing when they are a terminal."""

    def __init__(self) -> None:
        self._editing = False

    def opened(self, request: Request, again: bool) -> None:
        """Print the failure's traceback if the request carries one, then the session's
        header rule.

        Args:
            request: the session's first request at the terminal.
            again: whether this session had the terminal before (the header says so).
        """
        if request.preamble:
            self._rule("traceback")
            self.write(request.preamble)
        self._rule(f"PDB {request.kind} ({request.label}{', again' if again else ''})")

    def write(self, text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    def readline(self, prompt: str) -> str:
        if not self._editing and sys.stdin.isatty():
            with suppress(ImportError):
                import readline  # noqa: F401 (input() edits lines and keeps history with it)
            self._editing = True
        try:
            with ctrl_c_relay.relayed():  # whichever thread the kernel gives Ctrl-C to
                return input(prompt) + "\n"
        except EOFError:
            return EOF

    def closed(self, request: Request, note: str, last: bool) -> None:
        """Print `note`, then a rule saying how the session ended.

        Args:
            request: the rank's last request, whose `end` the rule names.
            note: names the ranks whose post-mortems were declined meanwhile; empty if none.
            last: whether no other rank is stopped (this terminal shows it the same).
        """
        if note:
            self.write(note + "\n")
        self._rule(f"PDB {request.end} ({request.label})")

    def idle(self) -> None:
        """Nothing of this terminal's state outlives a session."""

    def interrupted(self, request: Request) -> BaseException:
        return KeyboardInterrupt()

    def _rule(self, title: str) -> None:
        width = shutil.get_terminal_size().columns
        self.write(f"\n{f' {title} ':>^{max(width - 1, len(title) + 2)}}\n")


_terminal: Terminal = PlainTerminal()


def terminal() -> Terminal:
    """Where this process serves its ranks' debuggers."""
    return _terminal


def use_terminal(replacement: Terminal | None) -> None:
    """Serve ranks' debuggers at `replacement` from now on (None: this process's own)."""
    global _terminal
    _terminal = replacement if replacement is not None else PlainTerminal()


Answer = Callable[[str | None], None]


class Desk:
    """The debugger requests of one launch's ranks, and their order at the terminal.

    Ranks (or the threads that carry their links) `submit` requests, or `ask` and wait; the
    launching thread calls `serve` whenever `waiting` (it is woken by `wake`), and `close`
    when the launch ends.

    Args:
        wake: called (without the desk's lock) when a request arrives: wakes the serving thread.
    """

    def __init__(self, wake: Callable[[], None] = lambda: None):
        self._wake = wake
        self._lock = threading.Lock()
        self._pending: list[tuple[Request, Answer]] = []
        #: Ranks stopped in a debugger: a session open, or asked for.
        self._stopped: set[int] = set()
        #: Ranks whose open session has had the terminal, and the one that has it now.
        self._started: set[int] = set()
        self._shown: int | None = None
        self._answered_at = 0.0
        self._post_mortem: int | None = None
        self._declined: list[int] = []
        self._pausing = False
        self._used = False
        self._closed = False

    # ------------------------------------------------------------------ the ranks' side

    def submit(self, request: Request, answer: Answer) -> None:
        """Queue a rank's request.

        Args:
            request: what the rank's debugger asks: a line to read, output to show, or its
                session's end.
            answer: called once with the reply, from the serving thread (or at once when the
                desk is closed): the line read (`EOF` at end-of-file, `DECLINED` for a second
                post-mortem), or None for a request that reads no line.
        """
        declined = False
        with self._lock:
            closed = self._closed
            if not closed and self._second_post_mortem(request):
                self._declined.append(request.rank)
                declined = True
            elif not closed:
                if request.end is None:
                    self._stopped.add(request.rank)
                if self._stopped and not self._pausing:
                    debugger_clock.pause()
                    self._pausing = True
                self._pending.append((request, answer))
        if closed:
            answer(_closing_answer(request))
        elif declined:
            answer(DECLINED)
        else:
            self._wake()

    def ask(self, request: Request) -> str | None:
        """`submit`, and wait for the reply (a rank's thread, or the thread of its link)."""
        replied = threading.Event()
        reply: list[str | None] = []

        def answer(text: str | None) -> None:
            reply.append(text)
            replied.set()

        self.submit(request, answer)
        while not replied.wait(0.5):  # short waits: an abandoned rank thread can be interrupted
            pass
        return reply[0]

    # ------------------------------------------------------------------ the serving thread

    def waiting(self) -> bool:
        """Whether a request waits to be served."""
        with self._lock:
            return bool(self._pending)

    def serve(self) -> float | None:
        """Serve the requests that can be served now, in turn. Returns how long the caller may
        wait before calling again although no request arrives (a stepping session's grace
        running out), or None.

        Raises:
            What the terminal raises: after Ctrl-C at a prompt (`Terminal.interrupted`), or at
            the end of a session (pytest's `q`); the desk is closed then.
        """
        while True:
            with self._lock:
                picked, declined = self._pick()
                wait = self._grace_left() if picked is None else None
                idle = not (picked or self._stopped or self._pending) and (
                    self._used or self._pausing
                )
            for answer in declined:
                answer(DECLINED)
            if picked is None:
                if idle:
                    self._settle()
                return wait
            try:
                self._serve_one(*picked)
            except BaseException:
                self.close()
                raise

    def forget(self, ranks: Sequence[int]) -> None:
        """`ranks` are gone (their worker process died): their sessions end unseen."""
        with self._lock:
            dropped = [(r, a) for r, a in self._pending if r.rank in ranks]
            self._pending = [(r, a) for r, a in self._pending if r.rank not in ranks]
            self._stopped.difference_update(ranks)
            self._started.difference_update(ranks)
            if self._shown in ranks:
                self._shown = None
        for request, answer in dropped:
            answer(_closing_answer(request))

    def close(self) -> None:
        """The launch is over (or interrupted): every request still queued, and every one to
        come, is answered with end-of-file; the clocks go on."""
        with self._lock:
            self._closed = True
            pending, self._pending = self._pending, []
            self._stopped.clear()
        for request, answer in pending:
            answer(_closing_answer(request))
        self._settle()

    def _pick(self) -> tuple[tuple[Request, Answer] | None, list[Answer]]:
        """The request to serve next (lock held), and the post-mortems to decline."""
        declined: list[Answer] = []
        for request, answer in list(self._pending):
            if self._second_post_mortem(request):
                self._pending.remove((request, answer))
                self._declined.append(request.rank)
                self._stopped.discard(request.rank)
                declined.append(answer)
        for index, (request, _) in enumerate(self._pending):
            if request.rank == self._shown:
                return self._pending.pop(index), declined
        if not self._pending or (self._shown is not None and self._grace_left() is not None):
            return None, declined
        request, answer = self._pending.pop(0)
        if request.kind == POST_MORTEM and request.rank not in self._started:
            self._post_mortem = request.rank
        return (request, answer), declined

    def _second_post_mortem(self, request: Request) -> bool:
        """Whether `request` opens a post-mortem after another rank's was served (lock held)."""
        return (
            request.kind == POST_MORTEM
            and request.rank not in self._started
            and self._post_mortem not in (None, request.rank)
        )

    def _grace_left(self) -> float | None:
        """Seconds the shown session, stepping, keeps the terminal from waiting ranks."""
        if self._shown is None or self._shown not in self._stopped or not self._pending:
            return None
        left = GRACE_S - (time.monotonic() - self._answered_at)
        return left if left > 0 else None

    def _serve_one(self, request: Request, answer: Answer) -> None:
        shown = _terminal
        with self._lock:
            self._used = True
        if self._shown != request.rank and (request.end is None or request.output):
            again = request.rank in self._started
            with self._lock:
                self._shown = request.rank
                self._started.add(request.rank)
            shown.opened(request, again)
        if request.output:
            shown.write(request.output)
        if request.end is not None:
            answer(None)
            with self._lock:
                self._stopped.discard(request.rank)
                self._started.discard(request.rank)
                self._shown = None
                note = self._note(request)
                last = not (self._stopped or self._pending)
            shown.closed(request, note, last)
        elif request.prompt is not None:
            try:
                line = shown.readline(request.prompt)
            except KeyboardInterrupt:
                answer(EOF)
                raise shown.interrupted(request) from None
            answer(line)
            with self._lock:
                self._answered_at = time.monotonic()
        else:
            answer(None)

    def _note(self, request: Request) -> str:
        """A line for the end of the post-mortem: the ranks that failed meanwhile."""
        if request.rank != self._post_mortem or not self._declined:
            return ""
        size = request.size
        return (
            f"xlasim: {rank_span(sorted(self._declined))} of {size} failed too; this post-mortem "
            "is of the first rank that failed, the report shows every rank's traceback"
        )

    def _settle(self) -> None:
        """No rank is stopped any more: the clocks go on and the terminal is given back."""
        with self._lock:
            pausing, self._pausing = self._pausing, False
            used, self._used = self._used, False
            self._shown = None
        if pausing:
            debugger_clock.resume()
        if used:
            _terminal.idle()


def _closing_answer(request: Request) -> str | None:
    """What a closed desk answers: end-of-file to a line (pdb then quits), nothing else."""
    return EOF if request.prompt is not None else None
