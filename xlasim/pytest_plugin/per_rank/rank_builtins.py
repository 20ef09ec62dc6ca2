"""pytest's `capsys`, `capsysbinary`, `capfd`, `capfdbinary`, `caplog`, `recwarn` and
`monkeypatch`, made on each rank of a `@pytest.mark.xla` test (`rank_fixtures.py` hands them
over): each rank reads its own output, logs and warnings, and patches its own process.

pytest's fixtures redirect process-wide state (`sys.stdout`, file descriptors 1 and 2, the root
logger's handlers, `warnings.showwarning`), which ranks that are threads of one process share.
So these work per rank thread, on top of what xlasim already keeps per rank:

- capture: a rank's writes to `sys.stdout`/`sys.stderr` already go to its own buffers
  (`xlasim.reports.rank_output`); the fixture takes them over (`rank_output.redirected`) and
  `readouterr()` returns what the rank wrote since the last call. What is not read is the
  rank's output as usual (in the report, tagged by rank), as pytest shows a plain test's.
  `capfd` also captures file descriptors 1 and 2 (C code, subprocesses) when the rank is alone
  in its process (the default topology: a process per core); ranks sharing a process cannot
  tell each other's descriptor writes apart, so there `capfd` reads what `capsys` reads.
- `caplog`: pytest's own `LogCaptureFixture` and handler, with a filter that keeps the records
  this rank's thread logged.
- `recwarn`: a `pytest.WarningsRecorder` fed by a process-wide `warnings.showwarning` that
  sends each warning to the recorder of the rank that raised it (others go where they went).
- `monkeypatch`: a `pytest.MonkeyPatch` per process and test, shared by the test's ranks in
  that process and undone when the last of them is done (ranks that share a process share its
  modules; undoing one rank's patches under another would break it).
"""

from __future__ import annotations

import io
import logging
import os
import sys
import tempfile
import threading
import types
import warnings
from collections.abc import Callable, Generator, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any

import pytest
from _pytest.capture import CaptureResult  # pytest 9 no longer exports it as pytest.CaptureResult

from ...base import rank_context
from ...reports import rank_output

_lock = threading.Lock()


class RankCapture:
    """A rank's `capsys`/`capfd` (binary: their `...binary` forms): `readouterr()` returns and
    forgets what the rank wrote since the last call; `disabled()` lets its writes through."""

    def __init__(self, out: Any, err: Any, binary: bool, descriptors: _Descriptors | None):
        self._streams = (out, err)
        self._binary = binary
        self._descriptors = descriptors
        self._undisturbed: Callable[[], AbstractContextManager[None]] = nullcontext

    def readouterr(self) -> CaptureResult:
        """What the rank wrote to stdout and stderr since the last call (or the test's start)."""
        if self._descriptors is not None:
            out, err = self._descriptors.take()
        else:
            out, err = (_take(stream) for stream in self._streams)
        if self._binary:
            return CaptureResult(out.encode(), err.encode())
        return CaptureResult(out, err)

    @contextmanager
    def disabled(self) -> Iterator[None]:
        """Inside, the rank's writes are its ordinary output (reported with the test, tagged by
        rank; shown live under `-s`), not this fixture's."""
        with self._undisturbed(), (self._descriptors or _Descriptors.NONE).restored():
            yield


class _Descriptors:
    """File descriptors 1 and 2 of this process sent to temporary files while a rank alone in
    its process captures them; the rank's `sys` writes go there too, so the order holds."""

    NONE: _Descriptors

    def __init__(self) -> None:
        self.files = [tempfile.TemporaryFile(buffering=0) for _ in range(2)]  # noqa: SIM115 (closed by `close`)
        self.saved = [os.dup(1), os.dup(2)]
        self.streams = [
            io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), "utf-8", write_through=True)
            for fd in (1, 2)
        ]
        self._flush()
        for fd, file in zip((1, 2), self.files):
            os.dup2(file.fileno(), fd)

    def take(self) -> tuple[str, str]:
        taken = []
        for file in self.files:
            file.seek(0)
            taken.append(file.read().decode("utf-8", "replace"))
            file.seek(0)
            file.truncate()
        return taken[0], taken[1]

    @contextmanager
    def restored(self) -> Iterator[None]:
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
        try:
            yield
        finally:
            for fd, file in zip((1, 2), self.files):
                os.dup2(file.fileno(), fd)

    def close(self) -> tuple[str, str]:
        """Put the descriptors back; what was not read."""
        self._flush()
        left = self.take()
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)
        for file in self.files:
            file.close()
        return left

    @staticmethod
    def _flush() -> None:
        for stream in (sys.stdout, sys.stderr):
            with suppress(OSError, ValueError):
                stream.flush()


class _NoDescriptors(_Descriptors):
    def __init__(self) -> None:
        """Nothing to capture."""

    @contextmanager
    def restored(self) -> Iterator[None]:
        yield


_Descriptors.NONE = _NoDescriptors()


def _take(stream: io.StringIO) -> str:
    text = stream.getvalue()
    stream.seek(0)
    stream.truncate()
    return text


def _alone_in_process() -> bool:
    """Whether no other rank of this run shares this process (its descriptors are the rank's)."""
    import torch_xla.runtime as xr  # emulated: the rank's own answer

    return xr.addressable_device_count() == 1


def captured(binary: bool = False, descriptors: bool = False) -> Generator[RankCapture]:
    """A rank's capture fixture (see the module's docstring).

    Args:
        binary: whether `readouterr()` gives bytes (`capsysbinary`, `capfdbinary`), not str.
        descriptors: capture file descriptors 1 and 2 (`capfd`), not only `sys.stdout` and
            `sys.stderr`; done only when the rank is alone in its process, else as `capsys`.
    """
    fds = _Descriptors() if descriptors and _alone_in_process() else None
    out, err = fds.streams if fds is not None else (io.StringIO(), io.StringIO())
    capture = RankCapture(out, err, binary, fds)
    left = ("", "")
    try:
        with rank_output.redirected(out, err) as undisturbed:
            capture._undisturbed = undisturbed
            try:
                yield capture
            finally:
                left = fds.close() if fds is not None else (out.getvalue(), err.getvalue())
    finally:
        sys.stdout.write(left[0])  # what the test did not read: the rank's output as usual
        sys.stderr.write(left[1])


def capsys_on_rank() -> Generator[RankCapture]:
    yield from captured()


def capsysbinary_on_rank() -> Generator[RankCapture]:
    yield from captured(binary=True)


def capfd_on_rank() -> Generator[RankCapture]:
    yield from captured(descriptors=True)


def capfdbinary_on_rank() -> Generator[RankCapture]:
    yield from captured(binary=True, descriptors=True)


def _this_rank() -> Callable[[], bool]:
    """Whether the calling thread acts for the rank that calls this (its own thread, or one
    bound to its rank, such as the thread a collective's backward runs in)."""
    ident, context = threading.get_ident(), rank_context.current()

    def acting() -> bool:
        if threading.get_ident() == ident:
            return True
        now = rank_context.current()
        return context is not None and now is not None and now == context

    return acting


#: Per process and test: what the test's ranks in this process share, with how many use it.
_shared: dict[tuple[str, str], list[Any]] = {}


@contextmanager
def _shared_by_test(test: str, what: str, make: Callable[[], tuple[Any, Callable[[], None]]]):
    """`make()`'s value, made once per process and test and undone (its second item) when
    the last rank of the test in this process is done with it."""
    key = (test, what)
    with _lock:
        entry = _shared.get(key)
        if entry is None:
            entry = _shared[key] = [*make(), 0]
        entry[2] += 1
    try:
        yield entry[0]
    finally:
        with _lock:
            entry[2] -= 1
            if entry[2] == 0:
                del _shared[key]
                entry[1]()


def monkeypatch_on_rank(test: str) -> Generator[pytest.MonkeyPatch]:
    def make() -> tuple[pytest.MonkeyPatch, Callable[[], None]]:
        patcher = pytest.MonkeyPatch()
        return patcher, patcher.undo

    with _shared_by_test(test, "monkeypatch", make) as patcher:
        yield patcher


def caplog_on_rank(
    test: str, level: int | None, fmt: str, datefmt: str | None
) -> Generator[pytest.LogCaptureFixture]:
    """pytest's `caplog` over a handler that keeps this rank's records; the session's
    `log_level` lowers the root logger's level as pytest does (once per process and test).

    Args:
        test: identifies the test run among this process's (what its ranks here share).
        level: the session's `log_level` as a logging level number; None leaves levels alone.
        fmt: the session's `log_format`, for the records' text.
        datefmt: the session's `log_date_format`; None is logging's default.
    """
    from _pytest.logging import (
        LogCaptureHandler,
        caplog_handler_key,
        caplog_records_key,
        catching_logs,
    )

    handler = LogCaptureHandler()
    handler.setFormatter(logging.Formatter(fmt, datefmt))
    if level is not None:
        handler.setLevel(level)
    acting = _this_rank()
    handler.addFilter(lambda record: acting())
    item = types.SimpleNamespace(stash=pytest.Stash())
    item.stash[caplog_handler_key] = handler
    item.stash[caplog_records_key] = {"setup": [], "call": handler.records, "teardown": []}

    def lowered() -> tuple[None, Callable[[], None]]:
        root = logging.getLogger()
        before = root.level
        if level is not None:
            root.setLevel(min(before, level))
        return None, lambda: root.setLevel(before)

    with _shared_by_test(test, "log level", lowered), catching_logs(handler):
        fixture = pytest.LogCaptureFixture(item, _ispytest=True)  # type: ignore[arg-type]
        try:
            yield fixture
        finally:
            fixture._finalize()


class _WarningRoutes:
    """This process's warnings, each sent to the recorder of the rank that raised it while any
    rank records (`recwarn`); every other warning goes where it went before."""

    def __init__(self) -> None:
        self._recorders: list[tuple[Callable[[], bool], pytest.WarningsRecorder]] = []
        self._catcher: warnings.catch_warnings | None = None
        self._before: Callable[..., Any] = warnings.showwarning

    @contextmanager
    def recording(self, recorder: pytest.WarningsRecorder) -> Iterator[None]:
        entry = (_this_rank(), recorder)
        with _lock:
            if not self._recorders:
                self._catcher = warnings.catch_warnings()  # restores filters and the hook
                self._catcher.__enter__()
                warnings.simplefilter("always")  # as pytest's recwarn: every warning, always
                self._before = warnings.showwarning
                warnings.showwarning = self._show
            self._recorders.append(entry)
        try:
            yield
        finally:
            with _lock:
                self._recorders.remove(entry)
                if not self._recorders and self._catcher is not None:
                    self._catcher.__exit__(None, None, None)
                    self._catcher = None

    def _show(self, message, category, filename, lineno, file=None, line=None) -> None:
        for acting, recorder in list(self._recorders):
            if acting():
                recorder.list.append(
                    warnings.WarningMessage(message, category, filename, lineno, file, line)
                )
                return
        self._before(message, category, filename, lineno, file, line)


_routes = _WarningRoutes()


def recwarn_on_rank() -> Generator[pytest.WarningsRecorder]:
    recorder = pytest.WarningsRecorder(_ispytest=True)
    with _routes.recording(recorder):
        yield recorder


#: pytest's fixture name -> (the type of pytest's value, the function that makes the rank's).
BUILTINS: dict[str, tuple[type, Callable[..., Any]]] = {
    "capsys": (pytest.CaptureFixture, capsys_on_rank),
    "capsysbinary": (pytest.CaptureFixture, capsysbinary_on_rank),
    "capfd": (pytest.CaptureFixture, capfd_on_rank),
    "capfdbinary": (pytest.CaptureFixture, capfdbinary_on_rank),
    "caplog": (pytest.LogCaptureFixture, caplog_on_rank),
    "recwarn": (pytest.WarningsRecorder, recwarn_on_rank),
    "monkeypatch": (pytest.MonkeyPatch, monkeypatch_on_rank),
}


def stand_in(
    item: pytest.Item, test: str, name: str, value: Any
) -> tuple[Callable[..., Any], dict[str, Any]] | None:
    """How a rank makes its own `name` (the function and its arguments) when `value` is what
    pytest's own fixture of that name gave the pytest process; None for anything else.

    Args:
        item: the test, whose config gives `caplog`'s level and formats.
        test: identifies the test run among this process's, passed to fixtures the test's
            ranks in one process share (`monkeypatch`, `caplog`).
        name: the fixture's name in the test's signature.
        value: what that fixture gave the pytest process.
    """
    found = BUILTINS.get(name)
    if found is None or not isinstance(value, found[0]):
        return None
    make = found[1]
    if make is monkeypatch_on_rank:
        return make, {"test": test}
    if make is caplog_on_rank:
        from _pytest.logging import DEFAULT_LOG_DATE_FORMAT, get_log_level_for_setting

        config = item.config
        return make, {
            "test": test,
            "level": get_log_level_for_setting(config, "log_level"),
            "fmt": config.getini("log_format"),
            "datefmt": config.getini("log_date_format") or DEFAULT_LOG_DATE_FORMAT,
        }
    return make, {}
