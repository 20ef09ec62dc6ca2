"""Test bodies and `xla_world.run` functions that run in other processes: the rank's end.

A rank in a worker process (multi-process emulated topologies, the native backend's
`xmp.spawn` workers, the SPMD worker) gets a `remote.RemoteJob`. `run_job` imports the job's user
modules from their paths, asserts rewritten, under the parent's names (once per process:
`sys.modules` is the cache), then unpickles and runs it; `render_failure` renders a failure
the way pytest would have in the parent (traceback cut to the test, paths relative to the
parent's directory), here, where the frames are.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import pickle
import sys
import threading
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ...base.errors import XlasimError
from ...reports.frames import first_user, is_own
from .jobs import FailureStyle, RemoteJob

#: Held while this process's imports and `sys.path` change: a worker process may serve
#: several ranks, one per device thread (the native backend on CPU).
process_lock = threading.RLock()


def import_modules(modules: Sequence[tuple[str, str, bool]]) -> None:
    """Import the job's user modules as the parent has them (once per process): xlasim's work,
    not the program's (no access recorded, no scheduling point: docs/races.md)."""
    from ...races import watch  # imports torch: a rank's process has it already

    with process_lock, watch.outside_the_program():
        for name, path, rewrite in modules:
            if name in sys.modules:
                continue
            if not rewrite:
                try:
                    importlib.import_module(name)
                    continue
                except ImportError:
                    pass  # imported by pytest from its path (importlib mode): do the same
            try:
                _load(name, path, rewrite)
            except BaseException as error:
                raise XlasimError(
                    f"worker process {os.getpid()} could not import {name} from {path}: "
                    f"{type(error).__name__}: {error}"
                ) from error


def _load(name: str, path: str, rewrite: bool) -> None:
    _ensure_parents(name, Path(path))
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"no loader for {path}")
    module = importlib.util.module_from_spec(spec)
    code = None
    if rewrite:
        try:
            from _pytest.assertion.rewrite import _rewrite_test

            _, code = _rewrite_test(Path(path), None)  # type: ignore[arg-type]
        except Exception:
            code = None  # plain asserts still work; they only explain less
    sys.modules[name] = module
    try:
        if code is not None:
            exec(code, module.__dict__)
        else:
            spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)


def _ensure_parents(name: str, path: Path) -> None:
    """Dotted names need their parent packages; pytest's importlib mode makes up empty ones."""
    parts = name.split(".")[:-1]
    for depth in range(1, len(parts) + 1):
        parent = ".".join(parts[:depth])
        if parent in sys.modules:
            continue
        try:
            importlib.import_module(parent)
            continue
        except ImportError:
            pass
        module = types.ModuleType(parent)
        directory = path.parents[len(parts) - depth]
        module.__path__ = [str(directory)] if directory.name == parts[depth - 1] else []
        sys.modules[parent] = module
        if depth > 1:
            setattr(sys.modules[".".join(parts[: depth - 1])], parts[depth - 1], module)


def run_job(job: RemoteJob) -> Any:
    """What a rank in another process runs: the job's modules imported as the parent has them,
    then its function."""
    import_modules(job.modules)
    fn, args, kwargs = pickle.loads(job.data)
    return fn(*args, **kwargs)


def render_failure(style: FailureStyle, error: BaseException) -> Any:
    """pytest's rendering of a rank's failure (`Collect.render`, run where it was raised), or
    None when no user code ran: an error raised by the emulator's own call of the function
    (arguments that do not fit it) reads best as its one-line text.

    Args:
        style: the current test's traceback options and paths, as the parent process read them.
        error: what the rank raised, with its traceback.
    """
    if first_user(error.__traceback__) is None:
        return None
    return _pytest_repr(error, style)


def _pytest_repr(error: BaseException, style: FailureStyle) -> Any:
    """pytest's own rendering of a test failure (`Function.repr_failure`), made here."""
    from _pytest._code import filter_traceback
    from _pytest._code.code import ExceptionInfo, Traceback
    from _pytest.outcomes import Failed

    excinfo = ExceptionInfo.from_exception(error)
    tbstyle = "long" if style.tbstyle == "auto" else style.tbstyle
    if isinstance(error, Failed) and not error.pytrace:
        tbstyle = "value"

    def cut(info: ExceptionInfo[BaseException]) -> Traceback:
        full = info.traceback  # the user's frames only (xlasim.reports.frames)
        traceback_ = full.filter(lambda entry: not is_own(str(entry.path))) or full[-1:]
        if style.path is not None:
            cut_ = traceback_.cut(path=style.path, firstlineno=style.firstlineno)
            if style.firstlineno is None or cut_ == traceback_:
                cut_ = traceback_.cut(path=style.path)
                if cut_ == traceback_:
                    cut_ = cut_.filter(filter_traceback) or traceback_
            traceback_ = cut_
        traceback_ = traceback_.filter(info)
        if style.tbstyle == "auto" and len(traceback_) > 2:
            middle = (entry.with_repr_style("short") for entry in traceback_[1:-1])
            traceback_ = Traceback((traceback_[0], *middle, traceback_[-1]))
        return traceback_

    failure_repr = excinfo.getrepr(
        funcargs=True,
        abspath=True,
        showlocals=style.showlocals,
        style="long" if style.fulltrace else tbstyle,  # type: ignore[arg-type]
        tbfilter=False if style.fulltrace else cut,
        truncate_locals=style.verbosity <= 1,
        truncate_args=style.verbosity <= 2,
    )
    _relative_paths(failure_repr, style.cwd)
    return failure_repr


def _relative_paths(failure_repr: Any, cwd: str) -> None:
    """Paths as the parent shows them: relative to its directory when that is shorter."""
    from _pytest._code.code import ReprEntry
    from _pytest.pathlib import bestrelpath

    def relative(path: str) -> str:
        if not cwd:
            return path
        shorter = bestrelpath(Path(cwd), Path(path))
        return shorter if len(shorter) < len(path) else path

    for reprtraceback, reprcrash, _ in getattr(failure_repr, "chain", ()):
        if reprcrash is not None:
            reprcrash.path = relative(reprcrash.path)
        for entry in reprtraceback.reprentries:
            if isinstance(entry, ReprEntry) and entry.reprfileloc is not None:
                entry.reprfileloc.path = relative(entry.reprfileloc.path)
