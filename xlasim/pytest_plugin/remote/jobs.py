"""Test bodies and `xla_world.run` functions that run in other processes: the pytest
process's end.

Ranks live outside the pytest process in three cases: the worker processes of a multi-process
emulated topology (`--xla-processes`), the native backend's `xmp.spawn` workers, and the SPMD
worker. All run a `RemoteJob`, and answer with the core's `RankOutcome` (made by
`xlasim.reports.rank_outcome.call` where the rank ran). This module is what runs in the pytest process:
`pack` pickles `(fn, args, kwargs)` once (fixture values resolved in the parent; a clear error
when something does not pickle) and lists the modules the pickle refers to that a worker cannot
import by name: test modules and conftests, which pytest imported from their paths (under names
that depend on rootdir and import mode) with their asserts rewritten. What runs in the rank's
process is `remote/rank_side.py`.
"""

from __future__ import annotations

import io
import os
import pickle
import sys
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...base.errors import XlasimError
from ...reports.frames import PACKAGE_DIR

_SYSTEM_DIRS = tuple(
    {str(Path(p).resolve()) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
)


class NotPicklableError(XlasimError):
    """The function or its arguments cannot be sent to the processes the ranks live in."""

    def __init__(self, message: str, cause: BaseException):
        super().__init__(message)
        self.cause = cause


@dataclass(frozen=True)
class FailureStyle:
    """How pytest would render a failure of the current test; applied where the rank raised."""

    tbstyle: str = "auto"
    fulltrace: bool = False
    showlocals: bool = False
    verbosity: int = 0
    #: Report paths relative to this directory (the parent's; workers may work elsewhere).
    cwd: str = ""
    #: The test's file and, for a per-rank test, its function's first line: the traceback is
    #: cut there, as pytest cuts its own.
    path: str | None = None
    firstlineno: int | None = None

    @classmethod
    def of(cls, item: Any | None) -> FailureStyle:
        if item is None:
            return cls(cwd=os.getcwd())
        config = item.config
        path, firstlineno = str(getattr(item, "path", "")) or None, None
        if item.get_closest_marker("xla") is not None and hasattr(item, "obj"):
            from _pytest._code import Code
            from _pytest.compat import get_real_func

            try:
                code = Code.from_function(get_real_func(item.obj))
                path, firstlineno = str(code.path), code.firstlineno
            except (TypeError, ValueError):
                pass
        return cls(
            tbstyle=config.getoption("tbstyle", "auto"),
            fulltrace=bool(config.getoption("fulltrace", False)),
            showlocals=bool(config.getoption("showlocals", False)),
            verbosity=config.get_verbosity(),
            cwd=os.getcwd(),
            path=path,
            firstlineno=firstlineno,
        )


@dataclass(frozen=True)
class RemoteJob:
    """What a remote rank runs: pickled `(fn, args, kwargs)` and the modules to import first."""

    data: bytes
    #: (name, path, rewrite): imported from `path` as `name` before unpickling `data`.
    modules: tuple[tuple[str, str, bool], ...]
    style: FailureStyle


class _RecordingPickler(pickle.Pickler):
    """A pickler that notes the module of every class and function it pickles by reference."""

    def __init__(self, file: io.BytesIO):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.modules: set[str] = set()

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, (type, types.FunctionType)):
            self.modules.add(getattr(obj, "__module__", None) or "")
        return NotImplemented


def pack(
    fn: Callable[..., Any],
    args: Sequence[Any],
    kwargs: dict[str, Any],
    *,
    where: str,
    style: FailureStyle,
) -> RemoteJob:
    """Pickle a job for ranks in other processes; `NotPicklableError` says what did not pickle.

    Args:
        fn: the function the remote ranks call; must be importable by name (module level).
        args: its positional arguments, pickled with it.
        kwargs: its keyword arguments (fixture values already resolved), pickled with it.
        where: why the ranks are in other processes, the start of the error's message.
        style: how the ranks render a failure, carried in the job.
    """
    buffer = io.BytesIO()
    pickler = _RecordingPickler(buffer)
    try:
        pickler.dump((fn, tuple(args), dict(kwargs)))
    except Exception as error:
        name = getattr(fn, "__qualname__", None) or repr(fn)
        hint = (
            " (a lambda or a function defined inside another one: make it a module-level function)"
            if "<lambda>" in name or "<locals>" in name
            else ""
        )
        raise NotPicklableError(
            f"{where}, so the function and its arguments are pickled to them, as xmp.spawn's are "
            f"on a TPU VM; {name}{hint}: {type(error).__name__}: {error}",
            error,
        ) from error
    return RemoteJob(buffer.getvalue(), _modules_to_import(pickler.modules), style)


def _modules_to_import(names: set[str]) -> tuple[tuple[str, str, bool], ...]:
    """The user's modules among `names` (not xlasim's, not installed packages), with their files."""
    found = []
    for name in sorted(names):
        module = sys.modules.get(name)
        path = getattr(module, "__file__", None)
        if module is None or not path or name == "__main__":
            continue
        resolved = str(Path(path).resolve())
        if resolved.startswith(_SYSTEM_DIRS) or resolved.startswith(PACKAGE_DIR):
            continue
        rewritten = type(getattr(module, "__loader__", None)).__name__ == "AssertionRewritingHook"
        found.append((name, path, rewritten))
    return tuple(found)
