"""Coverage of what ranks in worker processes run, through coverage.py's own subprocess support.

When coverage.py measures the launching process (`coverage run`, pytest-cov's `--cov`), each
worker process measures itself with the same configuration and writes a parallel data file
(`.coverage.<host>.<pid>.<random>` beside the launching process's data file), which pytest-cov
and coverage's reporting commands combine with the launching process's data: the report counts
what the ranks ran, in every topology, as the threads mode's does.

Nothing here traces: a worker starts coverage.py with `coverage.process_startup()`, its hook for
processes started by a measured one, given the launching process's configuration serialized
(`COVERAGE_PROCESS_CONFIG`, as coverage's `[run] patch = subprocess` hands it to subprocesses),
with three settings of coverage's own turned on for workers:

- `parallel`: a data file of its own per worker process, for the launching process to combine;
- `patch = _exit`: a worker saves its data when it ends with `os._exit` (a rank that calls it,
  and every worker's normal end: multiprocessing ends its children with `os._exit`);
- `sigterm`: a worker stopped with SIGTERM (replaced after a hang, or stopped at exit) saves
  its data first.

Workers are forked from the zygote, whose environment is the launching process's when the
zygote started: coverage.py may not have been measuring then, and the zygote must not measure
itself anyway (its children would inherit a half-started measurement). So the launching process
hands its configuration with every job (`requested`), and a worker starts measuring at the first
job that asks (`follow`). coverage.py follows only the threads started after it, so the worker
then starts its rank threads afresh.

A worker killed by a signal it cannot handle (SIGSEGV, SIGKILL) loses what it measured since it
last saved (`save`: when its world flushes what stuck ranks recorded, `flush_records`, and as it
stops; the pytest plugin stops the workers before pytest-cov combines, `coverage_combine`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..base.environment import variable_set

#: The variable coverage.py's start-up hook reads a serialized configuration from.
CONFIG_ENV = "COVERAGE_PROCESS_CONFIG"
#: The variables that make coverage.py's start-up hook measure a new interpreter.
STARTUP_ENV = (CONFIG_ENV, "COVERAGE_PROCESS_START")
#: coverage.py's settings turned on in workers (see the module's docstring).
WORKER_PATCHES = ("_exit",)

#: The launching process's measurement and its configuration for workers (made once per
#: measurement: serializing costs ~0.1 ms, a job's check must cost nothing).
_requested: tuple[Any, str] | None = None
#: In a worker: the configuration it measures with, and coverage.py's measurement.
_following: str | None = None
_measuring: Any = None


def requested() -> str | None:
    """The configuration worker processes measure with: this process's own, as coverage.py
    serializes it, or None when coverage.py does not measure this process (one dictionary
    look-up when coverage.py is not even imported)."""
    global _requested
    coverage = sys.modules.get("coverage")
    if coverage is None:
        return None
    current = getattr(getattr(coverage, "Coverage", None), "current", None)
    measuring = current() if current is not None else None
    if measuring is None:
        return None
    if _requested is None or _requested[0] is not measuring:
        _requested = (measuring, for_workers(measuring.config))
    return _requested[1]


def startup_environment() -> dict[str, str]:
    """The variable that makes a Python interpreter this process starts measure itself as
    this process is measured, through coverage.py's start-up hook (a child pytest session of
    an SPMD test file), or nothing when coverage.py does not measure this process."""
    config = requested()
    return {} if config is None else {CONFIG_ENV: config}


def for_workers(config: Any) -> str:
    """A coverage.py configuration as workers start with it: a copy with `parallel`, the
    `_exit` patch and `sigterm` on, serialized (file paths made absolute, from this process's
    directory, as coverage.py does for its subprocesses)."""
    from coverage.config import CoverageConfig

    copy = CoverageConfig.deserialize(config.serialize())
    copy.parallel = True
    copy.sigterm = True
    copy.patch = sorted({*copy.patch, *WORKER_PATCHES})
    return copy.serialize()


def follow(config: str | None, directory: str) -> bool:
    """In a worker process: measure from now on as `config` says (None: as before). Returns
    whether a measurement started now: coverage.py follows only threads started after it, so
    the caller starts its rank threads afresh.

    Args:
        config: the launching process's configuration for workers (`requested`), or None.
        directory: the launching process's directory, from which coverage.py resolves the
            relative paths of its configuration (`relative_files`).
    """
    global _following, _measuring
    if config is None or config == _following:
        return False
    import coverage

    _stop()
    with variable_set(CONFIG_ENV, config), _directory(directory):
        _measuring = coverage.process_startup(force=True)
    _following = config
    return _measuring is not None


def trace_this_thread() -> None:
    """In a measured worker: the calling thread, started before the measurement, is traced from
    its next call, as coverage.py traces the threads started after it (the native backend's
    workers serve each device from a thread of its own, started with the process)."""
    import threading

    hook = threading.gettrace() if _measuring is not None else None
    if hook is not None and sys.gettrace() is None:
        sys.settrace(hook)


def save() -> None:
    """In a worker process: write what it measured so far to its data file (no-op unmeasured)."""
    if _measuring is not None:
        _measuring.save()


def _stop() -> None:
    """End an earlier measurement of this worker, its data saved."""
    global _measuring
    if _measuring is not None:
        _measuring.stop()
        _measuring.save()
        _measuring = None


@contextmanager
def unmeasured_start() -> Iterator[None]:
    """While inside, interpreters this process starts are not measured by coverage.py's
    start-up hook (the zygote: it only imports, and workers forked from a measured zygote
    would inherit its measurement half-started)."""
    saved = {name: os.environ.pop(name) for name in STARTUP_ENV if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


@contextmanager
def _directory(path: str) -> Iterator[None]:
    saved = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(saved)
