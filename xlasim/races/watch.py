"""The rank's side: its file accesses, how many synchronisations came before each, and the
delays of its schedule.

Python's audit hooks report `open`, `os.rename`/`os.replace`, `os.remove`, `os.mkdir`,
`os.rmdir`, `os.listdir`/`os.scandir` (and with them `glob`, `os.walk`); what they do not
see is wrapped: `torch.save`/`torch.load` (and `xm.save` through them; torch opens the file in
C++), existence checks (`os.path.exists`/`isfile`/`isdir`, `Path.exists`/`is_file`/`is_dir`),
`os.makedirs` (ENSURE when `exist_ok=True`) and `shutil.rmtree`, each recorded once (what they
open inside is not recorded again). An audit hook cannot be removed, so nothing is installed
until a launch asks for detection or a schedule (`install`); after that a thread that is not a
watched rank pays one thread-local look-up per audited event.
"""

from __future__ import annotations

import functools
import os
import pathlib
import shutil
import sys
import sysconfig
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..events import model
from ..events.hooks import current_stream
from ..reports.callsite import call_location, user_frame
from .accesses import (
    ENSURE,
    EXISTS,
    LIST,
    MKDIR,
    READ,
    REMOVE,
    RENAME_FROM,
    RENAME_TO,
    RMTREE,
    WRITE,
    Access,
)
from .schedule import Schedule

_local = threading.local()
_install_lock = threading.Lock()
_installed = False

_STDLIB = tuple(
    os.path.realpath(sysconfig.get_paths()[name]) + os.sep for name in ("stdlib", "platstdlib")
)
#: Paths no program races on: the system's pseudo-files and Python's bytecode caches.
_IGNORED_PREFIXES = ("/dev/", "/proc/", "/sys/")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class _Watched:
    """One rank's state during one launch."""

    def __init__(self, rank: int, host: int, record: bool, schedule: Schedule | None):
        self.rank = rank
        self.host = host
        self.accesses: list[Access] | None = [] if record else None
        self.schedule = schedule
        self.position = 0
        self.quiet = 0
        #: The host's directory (every rank of a host starts in it).
        self.root = os.getcwd() + os.sep


def _current() -> _Watched | None:
    return getattr(_local, "watched", None)


@contextmanager
def watching(
    rank: int,
    size: int,
    host: int,
    record: bool,
    seed: int | None,
    aborted: Callable[[], bool] = lambda: False,
) -> Iterator[list[Access] | None]:
    """Watch the calling thread as `rank` for one launch.

    Args:
        rank: the rank this thread plays.
        size: ranks in the launch.
        host: the rank's emulated host.
        record: record the rank's accesses (race detection).
        seed: the schedule to follow, or None.
        aborted: whether the launch was aborted (a schedule's delay then ends at once).

    Yields:
        the list the accesses are appended to (None when not recording).
    """
    if not record and seed is None:
        yield None
        return
    install()
    schedule = Schedule(seed, rank, size, aborted) if seed is not None else None
    _local.watched = watched = _Watched(rank, host, record, schedule)
    try:
        yield watched.accesses
    finally:
        _local.watched = None


@contextmanager
def synchronizing() -> Iterator[None]:
    """Around one collective, send or receive of the calling rank: counts it (the position of
    the accesses after it) and applies the schedule's delay when it is left."""
    watched = _current()
    if watched is None:
        yield
        return
    watched.position += 1
    yield
    if watched.schedule is not None:
        watched.schedule.after_collective()


def _record(op: str, path: Any) -> None:
    watched = _current()
    if watched is None or watched.quiet:
        return
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    if not isinstance(path, (str, os.PathLike)):
        return  # a file descriptor: its open was recorded
    path = os.path.abspath(os.fspath(path))
    if path.startswith(_IGNORED_PREFIXES) or f"{os.sep}__pycache__{os.sep}" in path:
        return
    watched.quiet += 1  # finding the site audits (sys._getframe)
    try:
        site = _site()
        stream = current_stream()
        if stream is not None:  # the launch is traced: the stream's file events (docs/events.md)
            stream.instant(model.FILE, op=op, path=path, site=site)
        if watched.accesses is not None:
            order = len(watched.accesses)
            on_host = path[len(watched.root) :] if path.startswith(watched.root) else path
            access = Access(
                watched.rank, op, path, site, watched.position, order, watched.host, on_host
            )
            watched.accesses.append(access)
        if watched.schedule is not None:
            watched.schedule.before_file_operation(watched.position)
    finally:
        watched.quiet -= 1


def _site() -> str:
    """The user's line: the first frame outside xlasim, torch, torch_xla and the standard
    library (`os.makedirs` or `glob` are not where the program decided to touch the file)."""
    frame = user_frame(sys._getframe(2))
    while frame is not None and frame.f_code.co_filename.startswith(_STDLIB):
        frame = user_frame(frame.f_back)
    return call_location(frame) if frame is not None else "<unknown location>"


def _open_op(mode: Any, flags: Any) -> str:
    if isinstance(mode, str):
        return WRITE if any(c in mode for c in "wax+") else READ
    return WRITE if isinstance(flags, int) and flags & _WRITE_FLAGS else READ


def _audit(event: str, args: tuple) -> None:
    if getattr(_local, "watched", None) is None:
        return
    try:
        _audited(event, args)
    except Exception as error:  # an audit hook that raises fails the audited call itself
        print(f"xlasim: could not record {event}{args!r}: {error!r}", file=sys.stderr)


def _audited(event: str, args: tuple) -> None:
    if event == "open":
        _record(_open_op(args[1], args[2]), args[0])
    elif event == "os.rename":
        _record(RENAME_FROM, args[0])
        _record(RENAME_TO, args[1])
    elif event in ("os.remove", "os.rmdir"):
        _record(REMOVE, args[0])
    elif event == "os.mkdir":
        _record(MKDIR, args[0])
    elif event in ("os.listdir", "os.scandir"):
        _record(LIST, "." if args[0] is None else args[0])


@contextmanager
def _quiet() -> Iterator[None]:
    watched = _current()
    if watched is None:
        yield
        return
    watched.quiet += 1
    try:
        yield
    finally:
        watched.quiet -= 1


def _recorded(op: str | Callable[..., str], original: Callable[..., Any]) -> Callable[..., Any]:
    """`original`, recording one access of its first argument (a path; a file object is not)
    and nothing of what it does inside."""

    @functools.wraps(original)
    def wrapper(path: Any, *args: Any, **kwargs: Any) -> Any:
        if _current() is None:
            return original(path, *args, **kwargs)
        _record(op(path, *args, **kwargs) if callable(op) else op, path)
        with _quiet():
            return original(path, *args, **kwargs)

    wrapper.__xlasim_original__ = original  # type: ignore[attr-defined]
    return wrapper


def _saved(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
    """torch.save's path is its second argument."""
    if _current() is None:
        return _torch_save(obj, f, *args, **kwargs)
    _record(WRITE, f)
    with _quiet():
        return _torch_save(obj, f, *args, **kwargs)


def _makedirs_op(path: Any, mode: int = 0o777, exist_ok: bool = False) -> str:
    return ENSURE if exist_ok else MKDIR


_torch_save: Callable[..., Any]


def install() -> None:
    """Add the audit hook and the wrappers (once per process)."""
    global _installed, _torch_save
    with _install_lock:
        if _installed:
            return
        import torch

        sys.addaudithook(_audit)
        _torch_save = torch.save
        torch.save = functools.wraps(_torch_save)(_saved)
        torch.load = _recorded(READ, torch.load)
        for name in ("exists", "lexists", "isfile", "isdir"):
            setattr(os.path, name, _recorded(EXISTS, getattr(os.path, name)))
        for name in ("exists", "is_file", "is_dir"):
            setattr(pathlib.Path, name, _recorded(EXISTS, getattr(pathlib.Path, name)))
        os.makedirs = _recorded(_makedirs_op, os.makedirs)
        shutil.rmtree = _recorded(RMTREE, shutil.rmtree)
        _installed = True
