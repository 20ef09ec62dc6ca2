"""torch.distributed with the `xla` backend, per rank.

torch.distributed keeps its process-group registry in module globals (`distributed_c10d._world`),
which emulated ranks, being threads, would share: the second `init_process_group` would fail.
torch documents `_world` as an override point; we swap in a proxy that gives every rank of a run
its own registry, as every TPU process has. `xla://` rendezvous gets an in-memory store per run
(no TCP port, so pytest-xdist workers never clash), and ProcessGroupXla's barrier, send and recv
go through the emulated rendezvous instead of a no-op and a world-wide permute.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress
from typing import Any

import torch
import torch.distributed as dist
import torch_xla
from torch.distributed import distributed_c10d as c10d

from ..base import rank_context
from ..reports.callsite import call_location
from . import queries
from .collectives.recv import check_received
from .rendezvous import Call
from .transfer import to_device, to_host
from .world_of_one import or_world_of_one, warn_outside

_GROUP_NAME_STRIDE = 1_000_000


class _GroupNames(dict):
    """A rank's `pg_names` (group -> name), remembering every name it held: destroying the
    world group empties it before torch unregisters the names from its process-wide table."""

    def __init__(self) -> None:
        super().__init__()
        self.held: set[str] = set()

    def __setitem__(self, group: Any, name: str) -> None:
        self.held.add(name)
        super().__setitem__(group, name)


class _RankRegistry(c10d._World):
    """One rank's process-group registry (torch keeps these in module globals)."""

    def __init__(self, rank: int):
        super().__init__()
        self._pg_map: dict = {}
        self._pg_names = _GroupNames()
        self._pg_group_ranks: dict = {}
        self._pg_backend_config: dict = {}
        self._tags_to_pg: dict = {}
        self._pg_to_tag: dict = {}
        # Group names are registered in a process-wide C++ table: keep each rank's distinct.
        self._group_count = rank * _GROUP_NAME_STRIDE
        self._first_group = self._group_count

    pg_map = property(lambda self: self._pg_map)
    pg_names = property(lambda self: self._pg_names)
    pg_group_ranks = property(lambda self: self._pg_group_ranks)
    pg_backend_config = property(lambda self: self._pg_backend_config)
    tags_to_pg = property(lambda self: self._tags_to_pg)
    pg_to_tag = property(lambda self: self._pg_to_tag)

    @property
    def group_count(self) -> int:
        return self._group_count

    @group_count.setter
    def group_count(self, value: int) -> None:
        self._group_count = self._first_group + value if value == 0 else value


class _RegistryProxy:
    """Stands in for `distributed_c10d._world`: routes to the calling rank's registry."""

    def __init__(self, shared: c10d._World):
        object.__setattr__(self, "_shared", shared)

    def _target(self) -> c10d._World:
        ctx = rank_context.current()
        if ctx is None:
            return object.__getattribute__(self, "_shared")
        return ctx.run.per_rank(ctx.rank, "dist", lambda: _RankRegistry(ctx.rank))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target(), name, value)


def _xla_rendezvous(url: str, timeout=..., **kwargs):  # the default of torch_xla's handler
    import torch_xla.runtime as xr

    ctx = rank_context.current()
    if ctx is None:
        # Outside any rank: rank 0 of a world of 1, as torch_xla's own handler answers in a
        # TPU VM process that never spawned (world_of_one.py); the store is only the group's
        # barrier, so one of this process does (torch_xla's listens on port 12355). In an SPMD
        # program (`xlasim run` of an SPMD script) torch_xla's backend then refuses the group
        # ("XLA backend is not supported with SPMD"), as its test/spmd expects.
        if not xr.is_spmd():
            warn_outside("init_process_group('xla')", queries.slice_cores())
        yield (dist.HashStore(), 0, 1)
        return
    store = ctx.run.store()
    yield (store, ctx.rank, ctx.world_size)


def _unregister_all(original: Callable[[], None]) -> Callable[[], None]:
    """`destroy_process_group()` unregisters every group name in the process; on a rank, only
    the rank's own (the others' may still be in use: compiled collectives resolve them)."""

    def unregister_all_process_groups() -> None:
        if rank_context.current() is None:
            return original()
        names = c10d._world.pg_names
        for name in names.held:
            with suppress(RuntimeError):  # already unregistered
                c10d._unregister_process_group(name)
        names.held.clear()

    return unregister_all_process_groups


def _ret_work(result: Any):
    future = torch.futures.Future()
    future.set_result(result)
    return torch._C._distributed_c10d._create_work_from_future(future)


def _group_ranks(group) -> tuple[int, ...]:
    return tuple(dist.get_process_group_ranks(group))


def _barrier(self, opts):
    ctx = rank_context.require("dist.barrier")
    call = Call("barrier", (("group", _group_ranks(self)),), call_location())
    ctx.run.gather(ctx.rank, _group_ranks(self), call, None)
    return _ret_work([])


def _send(self, tensors, dst_rank, tag=0):
    ctx = rank_context.require("dist.send")
    destination = dist.get_global_rank(self, dst_rank)
    for tensor in tensors:
        call = Call("send", (("dst", destination), ("tag", tag)), call_location())
        ctx.run.send(ctx.rank, ("dist", ctx.rank, destination, tag), call, to_host([tensor])[0])
        torch_xla.sync()  # as ProcessGroupXla's send does per tensor: the random stream moves on
    return _ret_work(tensors)


def _recv(self, out_tensors, src_rank, tag=0):
    ctx = rank_context.require("dist.recv")
    source = dist.get_global_rank(self, src_rank)
    for output in out_tensors:
        call = Call("recv", (("src", source), ("tag", tag)), call_location())
        sent_by, value = ctx.run.receive(ctx.rank, ("dist", source, ctx.rank, tag), call)
        check_received(value, output, sent_by, call)
        torch_xla.sync()  # as ProcessGroupXla's recv does per tensor: the random stream moves on
        with torch.no_grad():
            output.copy_(to_device([value.clone()], output.device)[0])  # never alias the sender
    return _ret_work(out_tensors)


def patches(cores: int) -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) triples that route torch.distributed through the
    emulation; outside any rank the `xla` group is torch_xla's own, in a world of 1.

    Args:
        cores: the emulated slice's cores (a group made outside any rank warns on several).
    """
    import importlib

    from torch_xla.distributed.xla_backend import ProcessGroupXla

    handlers = importlib.import_module("torch.distributed.rendezvous")._rendezvous_handlers
    group = ProcessGroupXla
    return [
        (c10d, "_world", _RegistryProxy(c10d._world)),
        (group, "barrier", or_world_of_one(_barrier, group.barrier, "dist.barrier", cores)),
        (group, "send", or_world_of_one(_send, group.send, "dist.send", cores)),
        (group, "recv", or_world_of_one(_recv, group.recv, "dist.recv", cores)),
        (
            c10d,
            "_unregister_all_process_groups",
            _unregister_all(c10d._unregister_all_process_groups),
        ),
        (handlers, "xla", _xla_rendezvous),
    ]
