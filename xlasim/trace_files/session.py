"""When a launch is traced, and the files written when it ends, however it ends.

A launch is traced when `XLASIM_TRACE` names a directory as it starts (`xlasim run --trace DIR`
and `pytest --xla-trace=DIR` set it). The first traced launch of a process into a directory
clears what an earlier run left there; later launches add to it. After every launch, finished
or failed, `trace.json` and `collectives.txt` are written from everything recorded so far; when
it failed (a hang, a mismatch, a rank that raised or died) the error names them, with a
`timeline.png` when matplotlib is installed.
"""

from __future__ import annotations

import gc
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from ..events import hooks, model, recorder
from . import canonical, chrome, timeline

TRACE_FILE = "trace.json"
PLOT_FILE = "timeline.png"
_cleared: set[Path] = set()


@dataclass(frozen=True)
class TraceFiles:
    """What a traced launch wrote."""

    directory: Path
    plot: Path | None = None

    @property
    def trace(self) -> Path:
        return self.directory / TRACE_FILE

    @property
    def collectives(self) -> Path:
        return self.directory / canonical.FILE

    def describe(self) -> str:
        lines = [
            f"the trace up to the failure: {self.trace} (open in https://ui.perfetto.dev or "
            f"chrome://tracing), {self.collectives} (every rank's collectives)"
        ]
        if self.plot is not None:
            lines.append(f"the timeline: {self.plot}")
        return "\n".join(lines)


@dataclass
class Launch:
    """A launch as tracing sees it: where it records (None: it does not), whether ranks failed
    (the launcher says so), and the files written when it ended."""

    directory: Path | None
    failed: bool = False
    files: TraceFiles | None = None


@contextmanager
def launch() -> Iterator[Launch]:
    """Trace the launch run inside when `XLASIM_TRACE` asks for it; write its files when it
    ends, and name them in the error when it raised. Ranks write out their events at their
    launch's end; the launcher has stuck ones do so before it replaces them."""
    traced = Launch(begin())
    if traced.directory is None:
        yield traced
        return
    try:
        yield traced
    except BaseException as error:
        traced.files = write(traced.directory, failed=True)
        name_files(error, traced.files)
        raise
    traced.files = write(traced.directory, failed=traced.failed)


def requested() -> Path | None:
    """The trace directory the environment asks for, if any."""
    value = os.environ.get(recorder.TRACE_ENV)
    return Path(value).absolute() if value else None


def begin() -> Path | None:
    """Switch this process's recording on or off for a launch that starts now; the directory
    (cleared if this process has not traced into it yet), or None when not tracing."""
    directory = requested()
    if directory is None:
        hooks.follow(None)
        return None
    if directory not in _cleared:
        hooks.follow(None)  # no stream of ours stays open in what is removed
        clear(directory)
        _cleared.add(directory)
    hooks.follow(str(directory))
    return directory


def clear(directory: Path) -> None:
    shutil.rmtree(directory / model.EVENTS_DIR, ignore_errors=True)
    for name in (TRACE_FILE, canonical.FILE, PLOT_FILE):
        with suppress(FileNotFoundError):
            (directory / name).unlink()


def write(directory: Path, failed: bool = False) -> TraceFiles:
    """Write the trace files from what is recorded; with a picture when the launch failed and
    matplotlib is there to draw it.

    The launching process writes them after its ranks finished, so every event recorded costs
    the launch this again (docs/tracing.md, the cost). It does so with the garbage collector
    paused: the timeline is tens of thousands of objects that all live until the files are
    written and then go by reference counting; collections in between find nothing, and would
    move them into older generations, whose full collections (the whole of torch's objects)
    then come sooner.

    Args:
        directory: the launch's trace directory, whose recorded events are read.
        failed: whether ranks of the launch failed (a picture is drawn only then).
    """
    tracer = recorder.current()
    if tracer is not None:
        tracer.flush()
    with _collector_paused():
        plot = _write_files(directory, failed)
    return TraceFiles(directory, plot)


def _write_files(directory: Path, failed: bool) -> Path | None:
    """Write `trace.json`, `collectives.txt` and, when `failed`, the picture; its path."""
    lines = timeline.load(directory, until=time.monotonic_ns())
    chrome.write(lines, directory / TRACE_FILE)
    (directory / canonical.FILE).write_text(canonical.text(lines))
    if not failed:
        return None
    from . import plot as plotting

    if not plotting.available():
        return None
    plotting.draw(lines, directory / PLOT_FILE)
    return directory / PLOT_FILE


@contextmanager
def _collector_paused() -> Iterator[None]:
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def name_files(error: BaseException, files: TraceFiles) -> None:
    """Add the files to an error's message (its report is read where the files are wanted).

    Args:
        error: the launch's error; its first argument, when a string, gains the files' names.
        files: what the traced launch wrote.
    """
    note = "\n" + files.describe()
    if error.args and isinstance(error.args[0], str):
        error.args = (error.args[0] + note, *error.args[1:])
