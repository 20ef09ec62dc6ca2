"""Test bodies and `xla_world.run` functions that run in other processes.

Ranks live outside the pytest process in two cases: the worker processes of a multi-process
emulated topology (`--xla-processes`), and the native backend's `xmp.spawn` workers. Both get a
`Job` from the parent and answer with a reply dict; this module is both ends:

- parent: `pack` pickles `(fn, args, kwargs)` once (fixture values resolved in the parent; a
  clear error when something does not pickle) and lists the modules the pickle refers to that a
  worker cannot import by name: test modules and conftests, which pytest imported from their
  paths (under names that depend on rootdir and import mode) with their asserts rewritten.
  `rebuild_error` turns a reply back into the exception the test outcome is made of.
- worker: `execute` imports those modules from their paths, asserts rewritten, under the
  parent's names (once per process: `sys.modules` is the cache), unpickles and runs the job
  with the thread's output captured, and describes a failure the way pytest would have in the
  parent (traceback cut to the test, paths relative to the parent's directory). Exceptions
  pickle back, except pytest's own outcomes (`pytest.skip`, `xfail`, `fail`), which claim to
  live in `builtins`: they travel as data and are rebuilt in the parent.

`run_in_rank` is the callable an emulated world runs on each rank: module-level and picklable,
it resolves nothing itself, and writes its reply to a file the parent reads after the run (the
core returns results only when every rank succeeded; the parent also needs the output and
outcome of ranks that passed, skipped or were released when others failed).
"""

from __future__ import annotations

import importlib
import importlib.util
import io
import os
import pickle
import sys
import threading
import traceback
import types
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from ..errors import WorldAbortedError, XlasimError
from .capture import Router

PACKAGE_DIR = str(Path(__file__).resolve().parent.parent) + os.sep
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
class Job:
    """What a remote rank runs: pickled `(fn, args, kwargs)` and the modules to import first."""

    data: bytes
    #: (name, path, rewrite): imported from `path` as `name` before unpickling `data`.
    modules: tuple[tuple[str, str, bool], ...]
    style: FailureStyle
    #: Also pass the rank's output through live (`pytest -s`).
    tee: bool = False


# --------------------------------------------------------------------------- parent side


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
    tee: bool = False,
) -> Job:
    """Pickle a job for ranks in other processes; `NotPicklableError` says what did not pickle."""
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
    return Job(buffer.getvalue(), _modules_to_import(pickler.modules), style, tee)


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


def rebuild_error(reply: dict[str, Any], error: BaseException | None) -> BaseException | None:
    """The exception a rank raised: pytest's outcomes rebuilt from data, others as they came."""
    outcome = reply.get("outcome")
    if outcome is None:
        return error
    import _pytest.outcomes

    class_name, args, state = outcome
    rebuilt = getattr(_pytest.outcomes, class_name).__new__(getattr(_pytest.outcomes, class_name))
    rebuilt.args = args
    rebuilt.__dict__.update(state)
    if "_use_item_location" in state:  # its frames stayed in the worker: report the test's line
        rebuilt._use_item_location = True
    return rebuilt


def read_reports(directory: str, size: int) -> dict[int, dict[str, Any]]:
    """The replies ranks wrote (a rank that hung or whose process died wrote none)."""
    reports = {}
    for rank in range(size):
        try:
            with open(os.path.join(directory, f"rank{rank}.pkl"), "rb") as file:
                reports[rank] = pickle.load(file)
        except (OSError, EOFError, pickle.UnpicklingError):
            continue
    return reports


# --------------------------------------------------------------------------- worker side

_thread = threading.local()
_process_lock = threading.RLock()
_streams: tuple[TextIO, TextIO] | None = None


class _Tee(io.TextIOBase):
    def __init__(self, buffer: io.StringIO, live: TextIO):
        self._buffer, self._live = buffer, live

    def write(self, text: str) -> int:
        self._buffer.write(text)
        self._live.write(text)
        return len(text)


def install_router() -> None:
    """Once per process: `sys.stdout`/`sys.stderr` writes go to the writing thread's job."""
    global _streams
    with _process_lock:
        if _streams is not None:
            return
        _streams = sys.stdout, sys.stderr
        sys.stdout = Router(sys.stdout, lambda: getattr(_thread, "out", None))  # type: ignore[assignment]
        sys.stderr = Router(sys.stderr, lambda: getattr(_thread, "err", None))  # type: ignore[assignment]


def import_modules(modules: Sequence[tuple[str, str, bool]]) -> None:
    """Import the job's user modules as the parent has them (once per process)."""
    with _process_lock:
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


def execute(job: Job) -> tuple[Any, BaseException | None, dict[str, Any]]:
    """Run a job on this thread: its result, its exception (None) and the reply to send back."""
    install_router()
    out, err = io.StringIO(), io.StringIO()
    live_out, live_err = _streams  # type: ignore[misc]
    _thread.out = _Tee(out, live_out) if job.tee else out
    _thread.err = _Tee(err, live_err) if job.tee else err
    reply: dict[str, Any] = {}
    result = error = None
    try:
        import_modules(job.modules)
        fn, args, kwargs = pickle.loads(job.data)
        result = fn(*args, **kwargs)
    except BaseException as caught:  # every failure goes back to the parent
        error = caught
        reply.update(describe_failure(caught, job.style))
    finally:
        _thread.out = _thread.err = None
    reply["stdout"], reply["stderr"] = out.getvalue(), err.getvalue()
    return result, error, reply


def describe_failure(error: BaseException, style: FailureStyle) -> dict[str, Any]:
    """What the parent needs to report `error` as pytest would: text, pytest's repr, outcome."""
    import _pytest.outcomes as outcomes
    from _pytest.outcomes import OutcomeException

    described: dict[str, Any] = {
        "released": isinstance(error, WorldAbortedError),
        "traceback": _traceback_text(error),
    }
    if isinstance(error, OutcomeException) and getattr(outcomes, type(error).__name__, 0) is type(
        error
    ):
        described["outcome"] = (type(error).__name__, error.args, dict(error.__dict__))
    # pytest's rendering only when user code ran: an error raised by the emulator's own call
    # of the function (arguments that do not fit it) reads best as its one-line text.
    if not described["released"] and _first_user_frame(error) is not None:
        try:
            failure_repr = _pytest_repr(error, style)
            pickle.dumps(failure_repr)
            described["repr"] = failure_repr
        except Exception:
            pass  # the text traceback is there
    return described


def portable(error: BaseException) -> BaseException:
    """`error` if it pickles (to cross back to the parent), else a stand-in that names it."""
    try:
        pickle.dumps(error)
        return error
    except Exception:
        return XlasimError(f"{type(error).__name__}: {error} (the original did not pickle)")


def portable_result(value: Any) -> Any:
    try:
        pickle.dumps(value)
        return value
    except Exception:
        return f"<unpicklable {type(value).__name__}: {value!r:.200}>"


def _first_user_frame(error: BaseException) -> types.TracebackType | None:
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(PACKAGE_DIR):
        tb = tb.tb_next
    return tb


def _traceback_text(error: BaseException) -> str:
    # start the report at the user's code, as pytest does
    return "".join(traceback.format_exception(type(error), error, _first_user_frame(error)))


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
        full = info.traceback
        start = 0
        while start < len(full) - 1 and str(full[start].path).startswith(PACKAGE_DIR):
            start += 1
        traceback_ = full[start:]
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


# --------------------------------------------------------------------------- emulated ranks

_windows: dict[Any, list[Any]] = {}


def run_in_rank(job: Job, report_dir: str) -> Any:
    """Run `job` on the calling emulated rank (in a worker process of a multi-process world).

    The reply goes to `report_dir/rank{r}.pkl`; the result and the exception go back through
    the world, so its failure semantics (abort, released ranks, reports) are the usual ones.
    """
    from ..context import current

    context = current()
    if context is None:
        raise XlasimError("run_in_rank runs on an emulated rank only")
    key = (getattr(context.run, "job", None), id(context.run))
    _open_window(key, context.addressable_device_count)
    result, error, reply = execute(job)
    reply["metrics"] = _close_window(key)
    path = os.path.join(report_dir, f"rank{context.rank}.pkl")
    with open(path + ".tmp", "wb") as file:
        pickle.dump(reply, file)
    os.replace(path + ".tmp", path)
    if error is not None:
        raise portable(error) from None
    return result


def _open_window(key: Any, ranks: int) -> None:
    """The first rank of this process in a run snapshots the process's XLA counters."""
    from .metrics import counts

    with _process_lock:
        if key not in _windows:
            _windows[key] = [ranks, counts()]


def _close_window(key: Any) -> dict[str, int] | None:
    """The last rank of this process to finish reports what the process's counters grew by."""
    from .metrics import counts

    with _process_lock:
        window = _windows[key]
        window[0] -= 1
        if window[0] > 0:
            return None
        del _windows[key]
    delta: Counter[str] = counts()
    delta.subtract(window[1])
    return dict(+delta)
