"""Who emits events: wrappers at the attributes user code calls, and each rank's launch.

The wrappers go on `xm.all_reduce`, `torch.distributed.barrier`, `torch_xla.sync`,
`torch.save`... whatever those attributes hold: xlasim's emulated collectives under emulation,
torch_xla's own natively. So a run on a TPU VM and one on emulated cores record the same events
from the same code, and traces of the two compare line for line. Wrappers are installed the first
time a process records (never when tracing is never asked for) and, once there, cost one
attribute read while recording is off.

Only the outermost call is recorded: what a recorded call does inside is its implementation,
which differs between emulation and a TPU (the emulated rendezvous executes the pending graph
first). `xm.mesh_reduce` is one collective, not also the rendezvous it makes; `xm.mark_step` is
one graph execution, not also the `torch_xla.sync` it calls.
"""

from __future__ import annotations

import functools
import inspect
import math
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from . import model, recorder

_local = threading.local()
_install_lock = threading.Lock()

#: torch_xla's collectives (the names xlasim emulates, plus `mesh_reduce`).
XM_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "collective_permute",
    "collective_broadcast",
    "send",
    "recv",
    "rendezvous",
    "xla_rendezvous",
    "mesh_reduce",
)
DIST_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "all_to_all_single",
    "broadcast",
    "barrier",
)


# ------------------------------------------------------------------------------ switching


def follow(directory: str | None) -> None:
    """Record into `directory` from now on in this process, or stop recording (None).

    Every process that runs ranks calls this when a launch reaches it: the launching process
    for its rank threads, a worker process for each job, a native worker for each test."""
    if not directory:
        recorder.stop()
        return
    recorder.start(directory)
    install()


@contextmanager
def launch(rank: int) -> Iterator[None]:
    """A rank's part of one launch: its stream opened afresh, begin and end events around it
    (how the rank's function ended is its outcome's business: `outcome.call` catches it)."""
    tracer = recorder.current()
    if tracer is None:
        yield
        return
    install()
    stream = tracer.open(rank)
    _local.stream = stream
    begin = stream.begin(model.LAUNCH, **labels(rank))
    try:
        yield
    finally:
        stream.end(begin, model.LAUNCH)
        stream.flush()
        _local.stream = None


def labels(rank: int) -> dict[str, Any]:
    """Where a rank runs, as the runtime answers it (emulated or real): host, process, device,
    chip and slice, for naming its process in a trace."""
    import torch_xla
    import torch_xla.runtime as xr

    found: dict[str, Any] = {"pid": os.getpid()}
    queries = {
        "world": xr.world_size,
        "host": xr.host_index,
        "process": xr.process_index,
        "device": lambda: str(torch_xla.device()),
    }
    for name, query in queries.items():
        try:
            found[name] = query()
        except Exception:
            continue
    try:
        attributes = xr.global_runtime_device_attributes()[rank]
    except Exception:
        return found
    for key in ("coords", "core_on_chip", "slice_index", "name"):
        if key in attributes:
            found[key] = attributes[key]
    return found


def current_stream() -> recorder.RankStream | None:
    """The calling thread's rank stream: the launch's thread, or a thread acting for a rank
    (autograd's backward threads act for their device's rank)."""
    tracer = recorder.current()
    if tracer is None:
        return None
    stream = getattr(_local, "stream", None)
    if stream is not None:
        return stream
    from ..base.rank_context import current

    context = current()
    if context is not None:
        return tracer.stream(context.rank)
    return tracer.only_stream()


# ------------------------------------------------------------------------------ wrappers


def _outermost(kind: str, describe: Callable[..., dict[str, Any] | None]):
    """A decorator: record `fn`'s calls as `kind` spans, described by `describe(stream, *args,
    **kwargs)` (None: not an event of interest), unless a recorded call encloses it."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def traced(*args: Any, **kwargs: Any) -> Any:
            if recorder.current() is None:  # off: the only cost, one global read
                return fn(*args, **kwargs)
            stream = current_stream()
            if stream is None or getattr(_local, "inside", False):
                return fn(*args, **kwargs)
            fields = describe(stream, *args, **kwargs)
            if fields is None:
                return fn(*args, **kwargs)
            _local.inside = True
            begin = stream.begin(kind, **fields)
            error = None
            try:
                return fn(*args, **kwargs)
            except BaseException as raised:
                error = type(raised).__name__
                raise
            finally:
                _local.inside = False
                stream.end(begin, kind, error=error)

        traced.__xlasim_traced__ = fn  # type: ignore[attr-defined]
        return traced

    return wrap


def _tensors(values: Any) -> list[Any]:
    import torch

    if isinstance(values, torch.Tensor):
        return [values]
    if isinstance(values, (list, tuple)):
        return [v for v in values if isinstance(v, torch.Tensor)]
    return []


#: A collective's description but its number, encoded once per distinct call (a training loop
#: makes the same few calls over and over): what makes recording cheap enough to leave on.
_described: dict[tuple, str] = {}


@functools.cache
def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _parameter_names(fn: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _bind(names: list[str], args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments a call passed, by parameter name, in the signature's order (so the order
    of keywords does not change a trace); a fraction of `Signature.bind`'s cost, which would
    be most of a recorded collective's. Arguments the signature does not name are left out:
    the call itself says what is wrong with them."""
    given = dict(zip(names, args))
    given.update(kwargs)
    return {name: given[name] for name in names if name in given}


def _simple(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


_GROUP_ARGUMENTS = ("groups", "group", "pairs", "replicas", "ordinals")
_SKIPPED_ARGUMENTS = ("output", "payload", "data", "reduce_fn", "async_op")


def _collective(op: str, fn: Callable[..., Any], group_of: Callable[[int, Any], list[int]]):
    """What a collective call is: its op, the group the calling rank is in, its number in that
    group, its scalar arguments (the signature ranks must agree on), its tensors and call site."""
    names = _parameter_names(fn)

    def describe(stream: recorder.RankStream, *args: Any, **kwargs: Any) -> dict[str, Any]:
        bound = _bind(names, args, kwargs)
        tensors, arguments, grouping = [], {}, ("groups", None)
        for name, value in bound.items():
            if name in _GROUP_ARGUMENTS:
                grouping = (name, value)
            elif name in _SKIPPED_ARGUMENTS:
                continue
            elif found := _tensors(value):
                tensors += found
            elif _simple(value):
                arguments[name] = value
        group = tuple(group_of(stream.rank, *grouping))
        shapes = tuple((t.dtype, tuple(t.shape)) for t in tensors)
        key = (op, group, tuple(arguments.items()), shapes, _site())
        fixed = _described.get(key)
        if fixed is None:
            fixed = _described[key] = recorder.encode(
                {
                    "op": op,
                    "group": list(group),
                    "arguments": arguments,
                    "tensors": [[_dtype_name(dtype), list(shape)] for dtype, shape in shapes],
                    "bytes": sum(math.prod(shape) * dtype.itemsize for dtype, shape in shapes),
                    "site": key[-1],
                }
            )
        return {"seq": stream.sequence(group), recorder.ENCODED: fixed}

    return _outermost(model.COLLECTIVE, describe)(fn)


def _site() -> str:
    """`path:LINE in function` of the user's call, its path relative to the import root it
    was found under (`sys.path`): the same on every host's working directory, in every mode,
    on a TPU VM's checkout and here."""
    from ..reports.callsite import user_frame  # imports torch: not before a process records

    frame = user_frame(sys._getframe(1))
    if frame is None:
        return "<unknown location>"
    path = _importable(frame.f_code.co_filename, len(sys.path))
    return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}"


@functools.lru_cache(maxsize=1024)
def _importable(filename: str, roots: int) -> str:
    """`filename` relative to the longest `sys.path` entry holding it (cached per file and
    `roots`, the length of `sys.path`: entries are added, as the workers do, seldom replaced)."""
    absolute = os.path.abspath(filename)
    found = [
        root
        for root in (os.path.abspath(r or os.curdir) for r in sys.path[:roots])
        if absolute.startswith(root.rstrip(os.sep) + os.sep)
    ]
    return os.path.relpath(absolute, max(found, key=len)) if found else absolute


def _world() -> int:
    import torch_xla.runtime as xr

    return xr.world_size()


def _replica_group(rank: int, name: str, groups: Any) -> list[int]:
    """The members of `rank`'s replica group, as XLA groups it: the group that holds the rank
    (every rank when `groups` is empty), the ranks a permutation's `pairs` name, the listed
    `replicas`/`ordinals` of a rendezvous."""
    if name == "pairs":
        return sorted({int(r) for pair in groups for r in pair})
    if not groups:
        return list(range(_world()))
    if name in ("replicas", "ordinals"):
        return [int(r) for r in groups]
    for group in groups:
        if rank in group:
            return [int(r) for r in group]
    return []  # not in any group: the collective itself raises


def _point_to_point(rank: int, name: str, value: Any) -> list[int]:
    """`xm.send`/`xm.recv` name a channel, not a peer: no group (and no flow in a trace)."""
    return []


def _process_group(rank: int, name: str, group: Any) -> list[int]:
    import torch.distributed as dist

    if group is None:
        return list(range(dist.get_world_size()))
    return list(dist.get_process_group_ranks(group))


def _graph(op: str):
    def describe(stream: recorder.RankStream, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return {"op": op, "site": _site()}

    return _outermost(model.GRAPH, describe)


def _path_of(target: Any) -> str | None:
    """The path a checkpoint call reads or writes; None for in-memory buffers (mesh_reduce's)."""
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    name = getattr(target, "name", None)
    return name if isinstance(name, str) else None


def _checkpoint(op: str, fn: Callable[..., Any], path_argument: str):
    names = _parameter_names(fn)

    def describe(stream: recorder.RankStream, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        bound = _bind(names, args, kwargs)
        target = bound.get(path_argument)
        if target is None and "storage_writer" in bound:
            target = getattr(bound["storage_writer"], "path", None)
        if target is None and "storage_reader" in bound:
            target = getattr(bound["storage_reader"], "path", None)
        path = _path_of(target)
        if path is None:
            return None
        return {"op": op, "path": os.path.abspath(path), "site": _site()}

    return _outermost(model.CHECKPOINT, describe)(fn)


def _targets() -> list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
    import torch
    import torch.distributed as dist
    import torch_xla
    import torch_xla.core.xla_model as xm

    targets: list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = []
    for name in XM_COLLECTIVES:
        group_of = _point_to_point if name in ("send", "recv") else _replica_group
        targets.append((xm, name, functools.partial(_collective, name, group_of=group_of)))
    for name in DIST_COLLECTIVES:
        targets.append(
            (dist, name, functools.partial(_collective, f"dist.{name}", group_of=_process_group))
        )
    targets += [
        (xm, "mark_step", _graph("xm.mark_step")),
        (torch_xla, "sync", _graph("torch_xla.sync")),
        (xm, "save", lambda fn: _checkpoint("xm.save", fn, "file_or_path")),
        (torch, "save", lambda fn: _checkpoint("torch.save", fn, "f")),
        (torch, "load", lambda fn: _checkpoint("torch.load", fn, "f")),
    ]
    dcp = sys.modules.get("torch.distributed.checkpoint")
    for name in ("save", "load", "save_state_dict", "load_state_dict"):
        if dcp is not None and hasattr(dcp, name):
            targets.append(
                (
                    dcp,
                    name,
                    functools.partial(_checkpoint, f"dcp.{name}", path_argument="checkpoint_id"),
                )
            )
    return targets


def install() -> None:
    """Wrap every attribute that emits events and is not wrapped yet. Cheap to repeat: each
    launch does, so `torch.distributed.checkpoint`, wrapped only once something imported it
    (importing it costs seconds), is wrapped from the launch after its import on."""
    with _install_lock:
        for owner, name, wrap in _targets():
            current = getattr(owner, name, None)
            if current is None or hasattr(current, "__xlasim_traced__"):
                continue
            setattr(owner, name, wrap(current))
