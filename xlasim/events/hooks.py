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
import itertools
import math
import os
import sys
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType
from typing import Any

from ..base.collective_names import XM_COLLECTIVES
from . import model, recorder

_local = threading.local()
_install_lock = threading.Lock()

#: torch_xla's collectives recorded: the names xlasim emulates, plus `mesh_reduce` (torch_xla's
#: own, built on `xm.rendezvous`: recorded as one collective).
RECORDED_XM_COLLECTIVES = (*XM_COLLECTIVES, "mesh_reduce")
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
    found = labels(rank)
    stream.world = found.get("world")
    begin = stream.begin(model.LAUNCH, **found)
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

#: A recorded call's site: the user's frame's code and line, made into text when the stream is
#: flushed (`_site_text`); None when no frame of the stack is the user's.
Site = tuple[CodeType, int] | None
#: What a wrapper keeps of a call (`freeze(stream, args, kwargs)`): hashable, no tensors (their
#: dtype and shape); None when the call is not an event of interest.
Freeze = Callable[[recorder.RankStream, tuple, dict[str, Any]], Any]
#: What the event of a kept call says (`describe(frozen, site)`): the group it is numbered in
#: (a collective's; None for others) and its fields (`,"key":value...`); made once per distinct
#: call, when a stream holding it is first flushed.
Describe = Callable[[Any, Site], tuple[tuple[int, ...] | None, str]]


def _outermost(kind: str, freeze: Freeze, describe: Describe):
    """A decorator: record `fn`'s calls as `kind` spans, unless a recorded call encloses them.

    Recording a call costs what `freeze` keeps of it, the user's frame (a walk out of xlasim,
    torch and torch_xla frames, usually none), a dictionary lookup (the same call from the
    same line is held as the same number) and two events held by the rank's stream; what the
    event says is made at flush. A function `typing_extensions.deprecated` wraps
    (`xm.mark_step`) warns from here, at the user's line, as it would unwrapped."""
    from ..reports.callsite import user_frame  # imports torch: not before a process records

    #: Each distinct (frozen call, site) by number, the number of each, and its description.
    calls: dict[int, tuple[Any, Site]] = {}
    numbers: dict[tuple[Any, int | None, int], int] = {}
    described: dict[int, tuple[tuple[int, ...] | None, str]] = {}
    counter = itertools.count()

    def render(stream: recorder.RankStream, number: int, unused: None) -> str:
        found = described.get(number)
        if found is None:
            found = described[number] = describe(*calls[number])
        group, fields = found
        if group is None:
            return fields
        return f',"seq":{stream.sequence(group)}{fields}'

    begin_slot = recorder.slot(kind, model.BEGIN, render)
    end_slot = recorder.slot(kind, model.END, recorder.render_end)

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        call, deprecation = _undeprecated(fn)

        @functools.wraps(fn)
        def traced(*args: Any, **kwargs: Any) -> Any:
            if deprecation is not None:
                warnings.warn(deprecation[0], deprecation[1], stacklevel=deprecation[2] + 1)
            if recorder.current() is None:  # off: the only cost, one global read
                return call(*args, **kwargs)
            local = _local
            if getattr(local, "inside", False):
                return call(*args, **kwargs)
            stream = getattr(local, "stream", None) or current_stream()
            if stream is None:
                return call(*args, **kwargs)
            frozen = freeze(stream, args, kwargs)
            if frozen is None:
                return call(*args, **kwargs)
            frame = user_frame(sys._getframe(1))
            if frame is None:
                key, site = (frozen, None, 0), None
            else:  # by the code's id: hashing a code object reads all its instructions
                code, line = frame.f_code, frame.f_lineno
                key, site = (frozen, id(code), line), (code, line)
            number = numbers.get(key)
            if number is None:
                number = next(counter)
                calls[number] = (frozen, site)  # holds the code: its id stays unique
                numbers[key] = number
            begin = stream.hold(begin_slot, number)
            local.inside = True
            error = None
            try:
                return call(*args, **kwargs)
            except BaseException as raised:
                error = type(raised).__name__
                raise
            finally:
                local.inside = False
                stream.hold(end_slot, begin, error)

        traced.__xlasim_traced__ = fn  # type: ignore[attr-defined]
        return traced

    return wrap


def _undeprecated(fn: Callable[..., Any]) -> tuple[Callable[..., Any], tuple | None]:
    """`fn` without `typing_extensions.deprecated`'s wrapper, and that wrapper's warning
    (message, category, stacklevel); `fn` itself and None for any other function. Its wrapper
    warns at the frame that called it, which under tracing is ours."""
    code = getattr(fn, "__code__", None)
    inner = getattr(fn, "__wrapped__", None)
    if code is None or inner is None or not hasattr(fn, "__deprecated__"):
        return fn, None
    if os.path.basename(code.co_filename) not in ("typing_extensions.py", "warnings.py"):
        return fn, None
    cells = dict(zip(code.co_freevars, (c.cell_contents for c in fn.__closure__ or ())))
    if not {"msg", "category", "stacklevel"} <= cells.keys():
        return fn, None
    return inner, (cells["msg"], cells["category"], cells["stacklevel"])


#: How a tensor is kept in a frozen call: (TENSOR, dtype, shape).
TENSOR = "<tensor>"
#: A value a frozen call does not keep (callables, buffers, process groups once resolved).
OPAQUE = "<opaque>"


def _freezer() -> Callable[[Any], Any]:
    """`freeze(value)`: a call's argument as a trace keeps it: scalars as they are, tensors as
    their dtype and shape, lists and tuples as tuples of those, anything else OPAQUE."""
    import torch

    tensor = torch.Tensor

    def freeze(value: Any) -> Any:
        kind = type(value)
        if value is None or kind is str or kind is int or kind is float or kind is bool:
            return value
        if kind is list or kind is tuple:
            return tuple([freeze(v) for v in value])
        if isinstance(value, tensor):
            return (TENSOR, value.dtype, value.shape)
        return OPAQUE

    return freeze


@functools.cache
def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _parameter_names(fn: Callable[..., Any]) -> list[str]:
    return list(inspect.signature(fn).parameters)


def _bind(names: list[str], args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments a call passed, by parameter name, in the signature's order (so the order
    of keywords does not change a trace). Arguments the signature does not name are left out:
    the call itself says what is wrong with them."""
    given = dict(zip(names, args))
    given.update(kwargs)
    return {name: given[name] for name in names if name in given}


def _tensor_specs(value: Any) -> list[tuple]:
    """The (TENSOR, dtype, shape) entries of a frozen argument: itself, or those it lists."""
    if type(value) is not tuple or not value:
        return []
    if value[0] is TENSOR:
        return [value]
    return [v for v in value if type(v) is tuple and v and v[0] is TENSOR]


def _simple(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


_GROUP_ARGUMENTS = ("groups", "group", "pairs", "replicas", "ordinals")
_SKIPPED_ARGUMENTS = ("output", "payload", "data", "reduce_fn", "async_op")
GroupOf = Callable[[recorder.RankStream, str, Any], tuple[int, ...]]


def _collective(op: str, fn: Callable[..., Any], group_of: GroupOf):
    """What a collective call is: its op, the group the calling rank is in (resolved as it is
    called: a process group may be gone by the flush), its number in that group (counted at
    flush, in program order), its scalar arguments (the signature ranks must agree on), its
    tensors and call site. Described once per distinct call: a training loop makes the same
    few calls over and over."""
    names = _parameter_names(fn)
    grouping = next((name for name in names if name in _GROUP_ARGUMENTS), None)
    position = names.index(grouping) if grouping is not None else len(names)
    freeze_value = _freezer()

    def freeze(stream: recorder.RankStream, args: tuple, kwargs: dict[str, Any]) -> tuple:
        given = kwargs.get(grouping, args[position] if position < len(args) else None)
        group = group_of(stream, grouping or "groups", given)
        frozen_kwargs = tuple([(k, freeze_value(v)) for k, v in kwargs.items()]) if kwargs else ()
        return group, freeze_value(args), frozen_kwargs

    def describe(frozen: tuple, site: Site) -> tuple[tuple[int, ...], str]:
        group, args, kwargs = frozen
        tensors: list[tuple] = []
        arguments: dict[str, Any] = {}
        for name, value in _bind(names, args, dict(kwargs)).items():
            if name in _GROUP_ARGUMENTS or name in _SKIPPED_ARGUMENTS:
                continue
            if found := _tensor_specs(value):
                tensors += found
            elif _simple(value):
                arguments[name] = value
        fields = {
            "op": op,
            "group": list(group),
            "arguments": arguments,
            "tensors": [[_dtype_name(dtype), list(shape)] for _, dtype, shape in tensors],
            "bytes": sum(math.prod(shape) * dtype.itemsize for _, dtype, shape in tensors),
            "site": _site_text(site, len(sys.path)),
        }
        return group, recorder.encode(fields)

    return _outermost(model.COLLECTIVE, freeze, describe)(fn)


@functools.lru_cache(maxsize=4096)
def _site_text(site: Site, roots: int) -> str:
    """`path:LINE in function` of the user's call, its path relative to the import root it
    was found under (`sys.path`, of which the first `roots` entries: entries are added, as the
    workers do, seldom replaced): the same on every host's working directory, in every mode, on
    a TPU VM's checkout and here."""
    if site is None:
        return "<unknown location>"
    code, line = site
    absolute = os.path.abspath(code.co_filename)
    found = [
        root
        for root in (os.path.abspath(r or os.curdir) for r in sys.path[:roots])
        if absolute.startswith(root.rstrip(os.sep) + os.sep)
    ]
    path = os.path.relpath(absolute, max(found, key=len)) if found else absolute
    return f"{path}:{line} in {code.co_name}"


def _world(stream: recorder.RankStream) -> int:
    if stream.world is None:
        import torch_xla.runtime as xr

        stream.world = xr.world_size()
    return stream.world


def _replica_group(stream: recorder.RankStream, name: str, groups: Any) -> tuple[int, ...]:
    """The members of the rank's replica group, as XLA groups it: the group that holds the
    rank (every rank when `groups` is empty), the ranks a permutation's `pairs` name, the
    listed `replicas`/`ordinals` of a rendezvous."""
    if name == "pairs":
        return tuple(sorted({int(r) for pair in groups for r in pair}))
    if not groups:
        return tuple(range(_world(stream)))
    if name in ("replicas", "ordinals"):
        return tuple(int(r) for r in groups)
    for group in groups:
        if stream.rank in group:
            return tuple(int(r) for r in group)
    return ()  # not in any group: the collective itself raises


def _point_to_point(stream: recorder.RankStream, name: str, value: Any) -> tuple[int, ...]:
    """`xm.send`/`xm.recv` name a channel, not a peer: no group (and no flow in a trace)."""
    return ()


def _process_group(stream: recorder.RankStream, name: str, group: Any) -> tuple[int, ...]:
    import torch.distributed as dist

    if group is None:
        return tuple(range(dist.get_world_size()))
    return tuple(dist.get_process_group_ranks(group))


def _graph(op: str):
    def freeze(stream: recorder.RankStream, args: tuple, kwargs: dict[str, Any]) -> tuple:
        return ()

    def describe(frozen: tuple, site: Site) -> tuple[None, str]:
        return None, recorder.encode({"op": op, "site": _site_text(site, len(sys.path))})

    return _outermost(model.GRAPH, freeze, describe)


def _path_of(target: Any) -> str | None:
    """The path a checkpoint call reads or writes; None for in-memory buffers (mesh_reduce's)."""
    if isinstance(target, (str, os.PathLike)):
        return os.fspath(target)
    name = getattr(target, "name", None)
    return name if isinstance(name, str) else None


def _checkpoint(op: str, fn: Callable[..., Any], path_argument: str):
    """A checkpoint call: its op and the absolute path it reads or writes (made absolute as it
    is called: the working directory may change by the flush)."""
    names = _parameter_names(fn)

    def freeze(stream: recorder.RankStream, args: tuple, kwargs: dict[str, Any]) -> str | None:
        bound = _bind(names, args, kwargs)
        target = bound.get(path_argument)
        if target is None and "storage_writer" in bound:
            target = getattr(bound["storage_writer"], "path", None)
        if target is None and "storage_reader" in bound:
            target = getattr(bound["storage_reader"], "path", None)
        path = _path_of(target)
        return None if path is None else os.path.abspath(path)

    def describe(path: str, site: Site) -> tuple[None, str]:
        fields = {"op": op, "path": path, "site": _site_text(site, len(sys.path))}
        return None, recorder.encode(fields)

    return _outermost(model.CHECKPOINT, freeze, describe)(fn)


def _targets() -> list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
    import torch
    import torch.distributed as dist
    import torch_xla
    import torch_xla.core.xla_model as xm

    targets: list[tuple[Any, str, Callable[[Callable[..., Any]], Callable[..., Any]]]] = []
    for name in RECORDED_XM_COLLECTIVES:
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
