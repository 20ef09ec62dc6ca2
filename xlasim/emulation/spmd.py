"""Where `xr.use_spmd()` may be turned on in an emulating process.

SPMD is one program over all of a slice's devices, switched on for the whole process and never
off again (`XLA_USE_SPMD` in the environment, the runtime's virtual device). An emulated rank is
one replica of a replica-style program: SPMD inside it would turn its process (a worker holding
other ranks, or the launching process in the threads mode) into an SPMD process for every launch
after it. So `xr.use_spmd()` is refused inside a rank, with an error that says what to do, and
wherever the pytest plugin refuses it (its own process, which later tests share); anywhere else,
such as a script under `xlasim run`, it is torch_xla's own, and then the runtime starts at once
on the CPU client so that `PJRT_DEVICE` can say TPU, as on a TPU VM.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..base import emulated_slice, rank_context
from ..base.errors import XlasimError
from ..base.public import public

if TYPE_CHECKING:
    from ..base.topology import Topology

#: How a pytest test asks for SPMD (named in every refusal).
MARKER = "@pytest.mark.xla(spmd=True)"

_allowed = False
_refusal: str | None = None
#: The emulated pod of this SPMD world (None natively or outside one), and the host that
#: `as_host` makes it act for (None: the one process it is).
_pod: Topology | None = None
_acting_host: int | None = None


@public
class SpmdRefusedError(XlasimError):
    """`xr.use_spmd()` was called where it would change what later code runs on."""


def allow() -> None:
    """This process exists to run SPMD code (the plugin's SPMD worker): never refuse."""
    global _allowed
    _allowed = True


def refuse_outside_ranks(why: str) -> None:
    """Refuse `xr.use_spmd()` in this process outside ranks too, saying `why`."""
    global _refusal
    _refusal = why


def _guarded(original: Callable[..., Any]) -> Callable[..., Any]:
    def use_spmd(*args: Any, **kwargs: Any) -> Any:
        rank = rank_context.current()
        if not _allowed and rank is not None:
            raise SpmdRefusedError(
                f"xr.use_spmd() on emulated rank {rank.rank} of {rank.world_size}: SPMD is one "
                "program over every device of the slice in one process, not one per replica, and "
                "it cannot be turned off, so it would stay on in this rank's process for every "
                f"later launch. Under pytest, mark the test {MARKER} (its body then runs once, in "
                "a process of its own with SPMD on over the slice); in a script, call "
                "xr.use_spmd() in the main process instead of launching ranks."
            )
        if not _allowed and _refusal is not None:
            raise SpmdRefusedError(f"xr.use_spmd() called here: {_refusal}")
        if emulated_slice.is_emulated() and _pod is None:  # a script's SPMD program: the pod's
            _become_pod(emulated_slice.topology())
        result = original(*args, **kwargs)
        if emulated_slice.is_emulated():
            _say_tpu_once_started()
        return result

    use_spmd.__doc__ = original.__doc__
    use_spmd.__wrapped__ = original  # type: ignore[attr-defined]
    return use_spmd


def patches() -> list[tuple[Any, str, Any]]:
    """The guarded `xr.use_spmd`, for `patches.install`."""
    import torch_xla.runtime as xr

    return [(xr, "use_spmd", _guarded(xr.use_spmd))]


def guard() -> None:
    """Guard `xr.use_spmd` in a process that does not emulate (the native backend's pytest
    process); emulating processes get the guard with the other patches."""
    import torch_xla.runtime as xr

    if not hasattr(xr.use_spmd, "__wrapped__"):
        xr.use_spmd = _guarded(xr.use_spmd)


def start_world(topology: Topology | None, devices: int) -> int:
    """Make this fresh process (no XLA runtime yet) an SPMD world of `devices` XLA devices.

    Emulated (`topology` given): the CPU client gets `devices` devices, which carry the slice's
    TPU identity (`queries.identity_patches`: names, coordinates, slice indices...) and, once the
    runtime has started on the CPU client, `PJRT_DEVICE` says TPU as on a TPU VM. Natively
    (`topology` None) the environment's own device is used as it is. Then SPMD goes on, for good.

    Args:
        topology: the emulated slice (its TPU identity and hosts), or None natively.
        devices: XLA devices of the world (emulated: the CPU client's device count).

    Returns:
        The runtime's device count.
    """
    global _pod
    if topology is not None:
        os.environ["PJRT_DEVICE"] = "CPU"
        os.environ["CPU_NUM_DEVICES"] = str(devices)
        emulated_slice.enter_worker(topology, 0)
        _put_on_identity()
        from ..tpu import arithmetic

        arithmetic.install()
        _pod = topology
    allow()
    import torch_xla.runtime as xr

    xr.use_spmd()
    if topology is not None:
        _say_tpu_once_started()
    return xr.global_runtime_device_count()


def _become_pod(topology: Topology) -> None:
    """Make this launching process the one process of the emulated pod, as `start_world` makes
    the plugin's SPMD worker: all of the pod's devices (the launching process was given its
    host's cores, which on a multi-host pod are fewer) and `as_host` for each of its hosts. So
    a script's `xr.global_runtime_device_count()` agrees with the device attributes, and
    `xs.HybridMesh` finds every slice's devices."""
    global _pod
    import torch_xla

    if topology.devices != topology.cores_per_host:
        if torch_xla._XLAC._xla_runtime_is_initialized():
            raise SpmdRefusedError(
                f"xr.use_spmd() after the XLA runtime started with host 0's "
                f"{topology.cores_per_host} cores: the emulated pod ({topology.describe()}) is "
                f"one SPMD process over its {topology.devices} devices (docs/spmd.md), which "
                "must be chosen before the runtime starts. Call xr.use_spmd() before the first "
                "use of an XLA device."
            )
        os.environ["CPU_NUM_DEVICES"] = str(topology.devices)
    _pod = topology
    _answer_as_acting_host()


def _say_tpu_once_started() -> None:
    """Start the runtime on the CPU client (it reads `PJRT_DEVICE=CPU` once, at its start), then
    let `PJRT_DEVICE` say TPU, as a TPU VM's environment does: SPMD code compares it with the
    device's hardware (`xm.xla_device_hw`) and torch_xla's debugging labels devices from it
    (visualize_sharding). Child processes must not emulate from here (emulate() refuses)."""
    import torch_xla.runtime as xr

    xr.global_runtime_device_count()
    os.environ["PJRT_DEVICE"] = "TPU"


def _put_on_identity() -> None:
    """Only the identity: an SPMD world has no emulated ranks, so torch_xla's own collectives,
    launches, rank queries and `xla` process group stay as they are (under SPMD torch_xla
    refuses `init_process_group('xla')` with its own AssertionError, which its tests expect)."""
    import torch_xla.runtime as xr

    from . import queries

    xr.device_type = lambda: queries.DEVICE_TYPE
    for owner, name, replacement in queries.identity_patches():
        setattr(owner, name, replacement)
    _answer_as_acting_host()


def _answer_as_acting_host() -> None:
    """Let `as_host` answer the host queries (`_HOST_QUERIES`) for the pod's hosts."""
    import torch_xla.runtime as xr

    for name, acting in _HOST_QUERIES.items():
        setattr(xr, name, _while_acting(acting, getattr(xr, name)))


#: The process queries a pod's host answers for itself: on a TPU pod SPMD runs one process per
#: host, so host h's process is process h of `hosts`.
_HOST_QUERIES: dict[str, Callable[[int, Topology], int]] = {
    "process_index": lambda host, pod: host,
    "host_index": lambda host, pod: host,
    "process_count": lambda host, pod: pod.hosts,
}


def _while_acting(
    acting: Callable[[int, Topology], int], original: Callable[..., Any]
) -> Callable[..., Any]:
    def query(*args: Any, **kwargs: Any) -> Any:
        if _acting_host is None or _pod is None:
            return original(*args, **kwargs)
        return acting(_acting_host, _pod)

    query.__name__ = original.__name__
    query.__doc__ = original.__doc__
    query.__wrapped__ = original  # type: ignore[attr-defined]
    return query


def hosts() -> range:
    """The hosts whose branches this process can run with `as_host`: every host of an emulated
    pod's SPMD world, and natively (a TPU VM: one process per host) only its own, so a loop
    `for h in hosts(): with as_host(h): ...` is the same test on both."""
    if _pod is not None:
        return range(_pod.hosts)
    import torch_xla.runtime as xr

    own = xr.process_index()
    return range(own, own + 1)


@contextmanager
def as_host(host: int) -> Iterator[None]:
    """Run code of a pod's SPMD program that branches on its host, as host `host` runs it.

    On a TPU pod the SPMD program runs once per host, and each host's process answers
    `xr.process_index()` / `xr.host_index()` with its own index, `xr.process_count()` with the
    host count, and reads its own TPU metadata (worker id): that is how each host picks its part
    of the data or of a checkpoint. The emulated pod is one process (docs/fidelity.md), so the
    host-dependent part runs host by host inside this block, which answers those queries as
    `host` would. The devices, the mesh and the program stay the whole pod's: what runs here is
    host `host`'s branch, not host `host`'s process. Anywhere else a process is its own host
    only, and the block changes nothing for it.

    Args:
        host: the host to act as, one of `hosts()`.

    Raises:
        XlasimError: `host` is not one this process can act as, or the block is nested.
    """
    global _acting_host
    if host not in hosts():
        where = f"this pod ({_pod.describe()})" if _pod is not None else "this process"
        raise XlasimError(
            f"xlasim.spmd.as_host({host}): {where} can act for hosts {_span(hosts())} only "
            "(every host of an emulated pod's SPMD world; elsewhere, as on a TPU VM, its own)"
        )
    if _acting_host is not None:
        raise XlasimError(
            f"xlasim.spmd.as_host({host}) inside as_host({_acting_host}): a process is one host"
        )
    if _pod is None:
        yield
        return
    _acting_host = host
    previous = emulated_slice.move_to_host(host)
    try:
        yield
    finally:
        emulated_slice.move_to_host(previous)
        _acting_host = None


def _span(hosts: range) -> str:
    return str(hosts.start) if len(hosts) == 1 else f"{hosts.start}..{hosts.stop - 1}"
