"""The rank's side: its file accesses, how many synchronisations came before each, and its
scheduling points under a schedule.

Python's audit hooks report `open`, `os.rename`/`os.replace`, `os.remove`, `os.mkdir`,
`os.rmdir`, `os.listdir`/`os.scandir` (and with them `glob`, `os.walk`), `os.truncate`,
`os.chmod`, `os.chown`, `os.utime`, `os.link`, `os.symlink`; what they do not see is wrapped:
`torch.save`/`torch.load` (and `xm.save` through them; torch opens the file in C++), `os.stat`/
`os.lstat` (and `os.path.getsize`, `getmtime`, `Path.stat` through them), existence checks
(`os.path.exists`/`lexists`/`isfile`/`isdir`, `os.access`, `Path.exists`/`is_file`/`is_dir`),
`os.makedirs` (ENSURE when `exist_ok=True`) and `shutil.rmtree`, each recorded once (what they
do inside is not recorded again). Paths are recorded with their symbolic links resolved (the
last component too, except for operations on the link itself: remove, rename, lstat...).
Python's own reading of code (imports, `linecache` for tracebacks) is not the program's and is
not recorded.

An access is the rank's when the rank's thread makes it, a thread the rank started (at the
rank's position when it is made), or a process it forked (a DataLoader worker: written to a file
the rank reads back when its launch ends, at the rank's position when it forked). An access
that cannot be recorded is not dropped: the launch fails naming it (`unrecorded`).

Under a schedule, every access of the rank's own thread is a scheduling point, before it is
made, and so is `time.sleep`, which then takes no time: the scheduler, not the clock, decides
who runs next (docs/races.md, "Schedules").

An audit hook cannot be removed, so nothing is installed until a launch asks for detection or a
schedule (`install`); after that a thread that is not a watched rank pays one thread-local
look-up per audited event.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import linecache
import os
import pathlib
import shutil
import sys
import tempfile
import threading
import time
import tokenize
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..events import model
from ..events.hooks import current_stream
from ..reports.callsite import call_location, is_internal
from .accesses import (
    CHMOD,
    CHOWN,
    ENSURE,
    EXISTS,
    LINK,
    LIST,
    MKDIR,
    READ,
    REMOVE,
    RENAME_FROM,
    RENAME_TO,
    RMTREE,
    STAT,
    SYMLINK,
    TRUNCATE,
    UTIME,
    WRITE,
    Access,
)

#: What a rank calls at a scheduling point: `point(what, detail)` (`Run.point` for the rank).
Point = Callable[[str, str], None]

_local = threading.local()
_install_lock = threading.Lock()
_installed = False

#: Paths no program races on: the system's pseudo-files and Python's bytecode caches.
_IGNORED_PREFIXES = ("/dev/", "/proc/", "/sys/")
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
#: Code whose file reads are Python's, not the program's: imports, and source lines read for
#: tracebacks and warnings.
_INCIDENTAL = ("<frozen importlib.", linecache.__file__, tokenize.__file__)


class _Watched:
    """One rank's state during one launch, shared by the threads it starts."""

    def __init__(self, rank: int, host: int, record: bool, point: Point | None):
        self.rank = rank
        self.host = host
        self.accesses: list[Access] | None = [] if record else None
        self.point = point
        #: The rank's own thread: the only one that takes scheduling points.
        self.thread = threading.get_ident()
        self.position = 0
        self.ended = False
        self.unrecorded: list[str] = []
        self.lock = threading.Lock()
        #: Where processes the rank forks write their accesses (made at the first fork).
        self.spill: str | None = None
        #: The host's directory (every rank of a host starts in it).
        self.root = os.path.realpath(os.getcwd()) + os.sep

    def add(self, access: Access) -> None:
        with self.lock:
            assert self.accesses is not None
            self.accesses.append(dataclasses.replace(access, order=len(self.accesses)))

    def blind(self, what: str, error: BaseException) -> None:
        with self.lock:
            self.unrecorded.append(f"{what}: {type(error).__name__}: {error}")


class _Forked(_Watched):
    """The rank's state in a process it forked: accesses go to a file the rank reads back."""

    def __init__(self, parent: _Watched):
        self.__dict__.update(parent.__dict__)
        self.point = None
        self.lock = threading.Lock()
        self.thread = threading.get_ident()
        self.by = f"process {os.getpid()} it forked"

    def add(self, access: Access) -> None:
        fields = dataclasses.asdict(access)
        fields.update(by=self.by, detached=True)
        assert self.spill is not None
        with self.lock, open(os.path.join(self.spill, f"{os.getpid()}.jsonl"), "a") as out:
            out.write(json.dumps(fields) + "\n")

    def blind(self, what: str, error: BaseException) -> None:
        self.add(Access(self.rank, "unrecorded", f"{what}: {type(error).__name__}: {error}", "", 0))


def _current() -> _Watched | None:
    watched = getattr(_local, "watched", None)
    return None if watched is None or watched.ended else watched


@contextmanager
def watching(
    rank: int, host: int, record: bool, point: Point | None
) -> Iterator[tuple[list[Access] | None, list[str]]]:
    """Watch the calling thread as `rank` for one launch.

    Args:
        rank: the rank this thread plays.
        host: the rank's emulated host.
        record: record the rank's accesses (race detection).
        point: the rank's scheduling point under a schedule, else None.

    Yields:
        the list the accesses are appended to (None when not recording), and the list of
        accesses that could not be recorded (each a sentence).
    """
    if not record and point is None:
        yield None, []
        return
    install()
    _local.watched = watched = _Watched(rank, host, record, point)
    _local.quiet = 0
    try:
        yield watched.accesses, watched.unrecorded
    finally:
        watched.ended = True
        _local.watched = None
        _read_back(watched)


def stop() -> None:
    """The rank's function is over: what its thread does from here (formatting its traceback,
    reporting) is not the program's."""
    watched = _current()
    if watched is not None:
        watched.ended = True


@contextmanager
def synchronizing() -> Iterator[None]:
    """Around one collective, send or receive of the calling rank: counts it (the position of
    the accesses after it)."""
    watched = _current()
    if watched is not None:
        watched.position += 1
    yield


def _record(op: str, path: Any, link: bool = False, dir_fd: int | None = None) -> None:
    """Record one access of the calling thread's rank, and take its scheduling point.

    Args:
        op: the operation.
        path: what the call was given (a path, bytes, a path-like, a file descriptor).
        link: the operation acts on a symbolic link itself, not on what it points to.
        dir_fd: the directory a relative path is relative to, when the call was given one.
    """
    watched = _current()
    if watched is None or getattr(_local, "quiet", 0):
        return
    _local.quiet = 1  # finding the path and the site may audit (readlink, frames)
    try:
        try:
            access = _access(watched, op, path, link, dir_fd)
        except Exception as error:
            watched.blind(f"{op} {path!r} at {call_location(sys._getframe(1))}", error)
            return
        if access is None:
            return
        stream = current_stream()
        if stream is not None:  # the launch is traced: the stream's file events (docs/events.md)
            stream.instant(model.FILE, op=op, path=access.path, site=access.site)
        if watched.accesses is not None:
            watched.add(access)
        if watched.point is not None and threading.get_ident() == watched.thread:
            watched.point(f"{op} at {access.site}", access.path)
    finally:
        _local.quiet = 0


def _access(watched: _Watched, op: str, path: Any, link: bool, dir_fd: int | None) -> Access | None:
    """The access `op` of `path` makes, or None when it is none of the program's."""
    if isinstance(path, int):
        path = _descriptor_path(path)
        if path is None:
            return None
    elif isinstance(path, (str, bytes, os.PathLike)):
        path = os.fsdecode(path)
        if "\0" in path:
            return None  # the call itself refuses it
        # an audit event says "no directory descriptor" with -1 (and AT_FDCWD is negative too)
        if dir_fd is not None and dir_fd >= 0 and not os.path.isabs(path):
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
    else:
        return None  # not a path: the call refuses it
    path = _resolved(path, link)
    if path.startswith(_IGNORED_PREFIXES) or f"{os.sep}__pycache__{os.sep}" in path:
        return None
    site = _site()
    if site is None:
        return None
    on_host = path[len(watched.root) :] if path.startswith(watched.root) else path
    by = "" if threading.get_ident() == watched.thread else _thread_name()
    return Access(watched.rank, op, path, site, watched.position, 0, watched.host, on_host, by=by)


def _descriptor_path(descriptor: int) -> str | None:
    """The file an open descriptor names (`os.truncate(fd)`, `os.chmod(fd)`); None for one
    that names no file in the file system (a pipe, a socket)."""
    try:
        target = os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:
        return None  # not an open descriptor: the call itself fails
    return target if target.startswith(os.sep) else None


def _resolved(path: str, link: bool) -> str:
    """`path` absolute, with its symbolic links resolved (all but its last component when the
    operation acts on a link itself)."""
    if not link:
        return os.path.realpath(path)
    head, tail = os.path.split(os.path.abspath(path))
    return os.path.join(os.path.realpath(head), tail)


def _thread_name() -> str:
    return f"its thread {threading.current_thread().name}"


def _site() -> str | None:
    """The user's line: the first frame outside xlasim, torch, torch_xla and the standard
    library (`os.makedirs` or `glob` are not where the program decided to touch the file);
    None when Python itself reads the file: anywhere inside an import (a module's code runs
    once per process, so its accesses would make two launches of a program differ), or a
    traceback's source line."""
    user = None
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if name.startswith(_INCIDENTAL):
            return None
        if user is None and not is_internal(name):
            user = frame
        frame = frame.f_back
    return call_location(user) if user is not None else "<unknown location>"


def _open_op(mode: Any, flags: Any) -> str:
    if isinstance(mode, str):
        return WRITE if any(c in mode for c in "wax+") else READ
    return WRITE if isinstance(flags, int) and flags & _WRITE_FLAGS else READ


def _audit(event: str, args: tuple) -> None:
    if getattr(_local, "watched", None) is None:
        return
    handler = _AUDITED.get(event)
    if handler is not None:
        handler(*args)


def _open(path: Any, mode: Any, flags: Any) -> None:
    if not isinstance(path, int):  # a descriptor wrapped in a file object: its open was recorded
        _record(_open_op(mode, flags), path)


def _rename(source: Any, target: Any, source_fd: Any = None, target_fd: Any = None) -> None:
    _record(RENAME_FROM, source, link=True, dir_fd=source_fd)
    _record(RENAME_TO, target, link=True, dir_fd=target_fd)


def _link(source: Any, target: Any, source_fd: Any = None, target_fd: Any = None) -> None:
    _record(STAT, source, dir_fd=source_fd)
    _record(LINK, target, link=True, dir_fd=target_fd)


#: The audit events recorded, each with the arguments Python passes (docs: "Audit events
#: table"), and what each records.
_AUDITED: dict[str, Callable[..., None]] = {
    "open": _open,
    "os.rename": _rename,
    "os.remove": lambda path, dir_fd=None: _record(REMOVE, path, link=True, dir_fd=dir_fd),
    "os.rmdir": lambda path, dir_fd=None: _record(REMOVE, path, link=True, dir_fd=dir_fd),
    "os.mkdir": lambda path, mode=None, dir_fd=None: _record(MKDIR, path, True, dir_fd),
    "os.listdir": lambda path: _record(LIST, "." if path is None else path),
    "os.scandir": lambda path: _record(LIST, "." if path is None else path),
    "os.truncate": lambda path, length=None: _record(TRUNCATE, path),
    "os.chmod": lambda path, mode=None, dir_fd=None: _record(CHMOD, path, dir_fd=dir_fd),
    "os.chown": lambda path, uid=None, gid=None, dir_fd=None: _record(CHOWN, path, dir_fd=dir_fd),
    "os.utime": lambda path, times=None, ns=None, dir_fd=None: _record(UTIME, path, dir_fd=dir_fd),
    "os.link": _link,
    "os.symlink": lambda source, target, dir_fd=None: _record(SYMLINK, target, True, dir_fd),
}


@contextmanager
def outside_the_program() -> Iterator[None]:
    """What the calling thread does inside is not the program's: not recorded, no scheduling
    point (xlasim's own work in a rank: importing a test's module)."""
    before = getattr(_local, "quiet", 0)
    _local.quiet = 1
    try:
        yield
    finally:
        _local.quiet = before


def _recorded(
    op: str | Callable[..., str], original: Callable[..., Any], link: bool = False
) -> Callable[..., Any]:
    """`original`, recording one access of its first argument (a path; a file object is not)
    and nothing of what it does inside."""

    @functools.wraps(original)
    def wrapper(path: Any, *args: Any, **kwargs: Any) -> Any:
        if _current() is None:
            return original(path, *args, **kwargs)
        if isinstance(path, (str, bytes, os.PathLike, int)):
            follows = kwargs.get("follow_symlinks", True)
            name = op(path, *args, **kwargs) if callable(op) else op
            _record(name, path, link=link or not follows, dir_fd=kwargs.get("dir_fd"))
        with outside_the_program():
            return original(path, *args, **kwargs)

    wrapper.__xlasim_original__ = original  # type: ignore[attr-defined]
    return wrapper


def _saved(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
    """torch.save's path is its second argument."""
    if _current() is None:
        return _torch_save(obj, f, *args, **kwargs)
    if isinstance(f, (str, bytes, os.PathLike)):
        _record(WRITE, f)
    with outside_the_program():
        return _torch_save(obj, f, *args, **kwargs)


def _makedirs_op(path: Any, mode: int = 0o777, exist_ok: bool = False) -> str:
    return ENSURE if exist_ok else MKDIR


def _sleep(seconds: float) -> None:
    """`time.sleep`: under a schedule, a scheduling point of the rank's own thread that takes
    no time (who runs next is the scheduler's decision; waiting would only cost time)."""
    watched = _current()
    if watched is None or watched.point is None or threading.get_ident() != watched.thread:
        return _time_sleep(seconds)
    with outside_the_program():
        site = _site()
        watched.point(f"sleep at {site}", "")


def _start(self: threading.Thread) -> None:
    """`Thread.start`: a thread a watched rank starts records its accesses as the rank's."""
    watched = _current()
    if watched is not None:
        run = self.run

        def run_as_the_rank() -> None:
            _local.watched = watched
            try:
                run()
            finally:
                _local.watched = None

        self.run = run_as_the_rank  # type: ignore[method-assign]
    _thread_start(self)


def _before_fork() -> None:
    """The forking rank's processes write their accesses into a directory of its own."""
    watched = _current()
    if watched is not None and watched.accesses is not None and watched.spill is None:
        with outside_the_program():
            watched.spill = tempfile.mkdtemp(prefix=f"xlasim-rank{watched.rank}-forked-")


def _after_fork_in_child() -> None:
    """A process a rank forked (a DataLoader worker) records as the rank, to its file."""
    watched = _current()
    if watched is not None:
        _local.watched = _Forked(watched) if watched.spill is not None else None


def _read_back(watched: _Watched) -> None:
    """Add the accesses of the processes the rank forked to its own."""
    if watched.spill is None:
        return
    with outside_the_program():
        for name in sorted(os.listdir(watched.spill)):
            with open(os.path.join(watched.spill, name)) as lines:
                for line in lines:
                    access = Access(**json.loads(line))
                    if access.op == "unrecorded":
                        watched.unrecorded.append(f"{access.by}: {access.path}")
                    elif watched.accesses is not None:
                        watched.add(access)
        shutil.rmtree(watched.spill, ignore_errors=True)


_torch_save: Callable[..., Any]
_time_sleep = time.sleep
_thread_start = threading.Thread.start


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
        for name in ("exists", "isfile", "isdir"):
            setattr(os.path, name, _recorded(EXISTS, getattr(os.path, name)))
        os.path.lexists = _recorded(EXISTS, os.path.lexists, link=True)
        os.access = _recorded(EXISTS, os.access)
        os.stat = _recorded(STAT, os.stat)
        os.lstat = _recorded(STAT, os.lstat, link=True)
        for name in ("exists", "is_file", "is_dir"):
            setattr(pathlib.Path, name, _recorded(EXISTS, getattr(pathlib.Path, name)))
        os.makedirs = _recorded(_makedirs_op, os.makedirs)
        shutil.rmtree = _recorded(RMTREE, shutil.rmtree, link=True)
        time.sleep = _sleep
        threading.Thread.start = _start  # type: ignore[method-assign]
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
        _installed = True
