"""pytest's debugger on ranks: `--pdb`, `--trace` and `breakpoint()` in a test's ranks.

A rank's pdb runs where the rank's frames are and reads and writes at the terminal of the
pytest process (`xlasim/reports/rank_debugger.py`, `debugger_desk.py`, docs/debugging.md). This
module is the pytest end of it:

- `PytestTerminal` shows a rank's session as pytest shows its own debugger: pytest's capture
  suspended (`capturemanager`), the `>>> PDB set_trace (rank 3/8) >>>` rules, the
  `pytest_enter_pdb`/`pytest_leave_pdb` hooks (pytest-timeout stops its clock there); `q` ends
  the session (`pytest.exit`, as pytest's `q` does), Ctrl-C at a prompt too.
- `on_ranks` makes a run's function open a post-mortem in the rank that fails (`--pdb`), and
  `test_body` starts a per-rank test's body under pdb on every rank (`--trace`). With neither
  option the function is unchanged: nothing is relayed unless a rank stops.
"""

from __future__ import annotations

import bdb
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from _pytest.outcomes import Exit, Skipped, XFailed

from ...base.errors import RankAbandoned, WorldAbortedError
from ...reports import rank_debugger
from ...reports.debugger_desk import POST_MORTEM, QUIT, PlainTerminal, Request


@dataclass(frozen=True)
class RankDebugger:
    """What `pytest_enter_pdb`/`pytest_leave_pdb` get for a rank's debugger (its pdb lives in
    the rank)."""

    label: str


class PytestTerminal(PlainTerminal):
    """A rank's debugger session at pytest's terminal, as pytest shows its own."""

    def __init__(self, config: pytest.Config):
        super().__init__()
        self._config = config
        self._capturing: str | bool = False
        self._entered: RankDebugger | None = None
        #: A rank's post-mortem was shown for the running test (pytest's own is not needed),
        #: and it ended with `q`.
        self.post_mortem_shown = False
        self.post_mortem_quit = False

    def forget(self) -> None:
        """A new test starts."""
        self.post_mortem_shown = self.post_mortem_quit = False

    def opened(self, request: Request, again: bool) -> None:
        """Suspend pytest's capture and tell its `pytest_enter_pdb` hook as its own debugger
        does (first session only), then show the traceback, if any, and the session's header.

        Args:
            request: the session's first request at the terminal (whose rank, which kind).
            again: whether this session had the terminal before (the header says so).
        """
        if self._entered is None:
            capman = self._config.pluginmanager.getplugin("capturemanager")
            self._capturing = capman.is_capturing() if capman else False
            if capman:
                capman.suspend(in_=True)
            self._entered = RankDebugger(request.label)
            self._config.hook.pytest_enter_pdb(config=self._config, pdb=self._entered)
        writer = self._writer()
        writer.line()
        if request.preamble:
            writer.sep(">", "traceback")
            writer.write(request.preamble)
            writer.sep(">", "entering PDB")
        turned_off = {
            "global": " (IO-capturing turned off)",
            False: "",
        }.get(self._capturing, f" (IO-capturing turned off for {self._capturing})")
        again_ = ", again" if again else ""
        writer.sep(">", f"PDB {request.kind} ({request.label}{again_}){turned_off}")
        if request.kind == POST_MORTEM:
            self.post_mortem_shown = True

    def closed(self, request: Request, note: str, last: bool) -> None:
        """Show `note` and how the session ended; `q` ends the pytest session as pytest's own
        debugger does (a post-mortem's, once the test is reported).

        Args:
            request: the rank's last request, whose `end` says how the session ended.
            note: names the ranks whose post-mortems were declined meanwhile; empty if none.
            last: whether no other rank is stopped (pytest's capture resumes then).
        """
        writer = self._writer()
        writer.line()
        if note:
            writer.line(note)
        if request.end == QUIT:  # pytest ends the session, as after its own debugger's `q`
            if request.kind != POST_MORTEM:
                pytest.exit("Quitting debugger")
            self.post_mortem_quit = True  # after the test's report
            return
        resumed = " (IO-capturing resumed)" if last and self._capturing else ""
        writer.sep(">", f"PDB continue ({request.label}){resumed}")

    def idle(self) -> None:
        if self._entered is None:
            return
        entered, self._entered = self._entered, None
        capman = self._config.pluginmanager.getplugin("capturemanager")
        if self._capturing and capman:
            capman.resume()
        self._config.hook.pytest_leave_pdb(config=self._config, pdb=entered)

    def interrupted(self, request: Request) -> BaseException:
        return Exit(f"KeyboardInterrupt at the debugger prompt of {request.label}")

    def _writer(self) -> Any:
        from _pytest.config import create_terminal_writer

        return create_terminal_writer(self._config)


def post_mortem_on_failure(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """What a rank runs under `pytest --pdb`: `fn`, and pdb at the frame where it failed (the
    first failing rank's; `rank_debugger.post_mortem`), before the failure is reported.

    Args:
        fn: the rank's function (test body or `xla_world.run` function).
        args: its positional arguments.
        kwargs: its keyword arguments.
    """
    try:
        return fn(*args, **kwargs)
    except BaseException as error:
        if _worth_a_post_mortem(error):
            rank_debugger.post_mortem(error)
        raise


_NOT_FAILURES = (
    Skipped,
    XFailed,
    Exit,
    bdb.BdbQuit,
    KeyboardInterrupt,
    WorldAbortedError,
    RankAbandoned,
)


def _worth_a_post_mortem(error: BaseException) -> bool:
    """What pytest opens its debugger for: a failure, not a skip, an xfail, a quit or a rank
    released because another failed."""
    return not isinstance(error, _NOT_FAILURES)


def on_ranks(config: pytest.Config, item: pytest.Item | None, fn: Callable[..., Any]) -> Any:
    """The function ranks run for `item`: under `--pdb`, with a post-mortem where it fails
    (not for a test marked xfail, as pytest opens none for those).

    Args:
        config: the session's config, read for `--pdb`.
        item: the running test; None when no test runs (a session-scoped fixture's run).
        fn: what the ranks would run without a debugger.
    """
    if not config.getoption("usepdb", False):
        return fn
    if item is not None and item.get_closest_marker("xfail") is not None:
        return fn
    return functools.partial(post_mortem_on_failure, fn)


def test_body(item: pytest.Function) -> Callable[..., Any]:
    """The body a per-rank test's ranks run: under `--trace`, started under pdb on every rank
    (stopped at its first line), as pytest starts a test's body."""
    if item.config.getoption("trace", False):
        return functools.partial(rank_debugger.runcall, item.obj)
    return item.obj
