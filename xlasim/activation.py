"""Turning emulation on: choose the device count before torch_xla's runtime starts, then patch.

The XLA CPU client reads `PJRT_DEVICE` and `CPU_NUM_DEVICES` once, when the runtime starts (the
first use of a device). After that the count is fixed, so activating too late is an error that
says how to fix it rather than a world of the wrong size.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from .base import emulated_slice, rank_context
from .base.emulated_slice import DEVICES_ENV
from .base.errors import DeviceCountError, RuntimeAlreadyStartedError, XlasimError
from .base.host_memory import available_memory
from .base.topology import Topology, preset
from .emulation import patches
from .tpu.arithmetic_choice import ARITHMETIC_ENV, check_arithmetic

if TYPE_CHECKING:  # the world's modules import torch: not before the zygote has started
    from .ranks.world import World

PROCESSES_ENV = "XLASIM_PROCESSES"
HOSTS_ENV = "XLASIM_HOSTS"
TOPOLOGY_ENV = "XLASIM_TOPOLOGY"
#: Resident memory budgeted per emulated core, which bounds how many cores a machine holds.
#: A core that is a thread costs ~1.3 MiB idle (64 of them after an all_reduce: 870 MB RSS, 790 MB
#: of it torch + torch_xla); a core with a process of its own ~90 MiB (64 isolated ranks after an
#: all_reduce: ~6 GiB of proportional set size, forked from a shared zygote). The rest is room for
#: each core's compiled programs and buffers.
BYTES_PER_THREAD_CORE = 48 * 2**20
BYTES_PER_PROCESS_CORE = 192 * 2**20
HARD_MAX_DEVICES = 1024


def max_devices(threaded: bool = False) -> int:
    """How many cores this machine can hold: available memory over the per-core cost.

    Args:
        threaded: count cores as threads of one process (the fast mode, `processes=1`) instead
            of cores with a process each, as `emulate` gives by default.
    """
    available = available_memory()
    if available is None:
        return HARD_MAX_DEVICES
    per_core = BYTES_PER_THREAD_CORE if threaded else BYTES_PER_PROCESS_CORE
    return max(1, min(HARD_MAX_DEVICES, available // per_core))


def _requested(devices: int | None) -> int:
    if devices is None:
        raw = os.environ.get(DEVICES_ENV)
        if raw is None:
            raise DeviceCountError(
                f"no device count: call xlasim.emulate(devices=N) or set {DEVICES_ENV}=N"
            )
        try:
            devices = int(raw)
        except ValueError:
            raise DeviceCountError(f"{DEVICES_ENV}={raw!r} is not a whole number") from None
    if isinstance(devices, bool) or not isinstance(devices, int):
        raise DeviceCountError(f"devices must be a whole number, got {devices!r}")
    if devices < 1:
        raise DeviceCountError(f"devices must be at least 1, got {devices}")
    return devices


def _check_fits(topology: Topology) -> Topology:
    limit = max_devices(threaded=topology.threaded)
    if topology.devices > limit:
        per_core = BYTES_PER_THREAD_CORE if topology.threaded else BYTES_PER_PROCESS_CORE
        kind = "threads of one process" if topology.threaded else "with a process each"
        raise DeviceCountError(
            f"{topology.devices} emulated cores do not fit this machine: at ~{per_core >> 20} MiB "
            f"per core ({kind}), its available memory holds at most {limit}"
            + ("" if topology.threaded else "; as threads of one process (processes=1) more fit")
        )
    return topology


def emulate(
    devices: int | None = None,
    processes: int | None = None,
    hosts: int | None = None,
    topology: str | None = None,
    arithmetic: str | None = None,
) -> Topology:
    """Emulate a slice: `devices` cores (default `XLASIM_DEVICES`) in `processes` worker processes
    (default `XLASIM_PROCESSES`, else one per core, as on TPU v4+; 1: every core a thread of this
    process, the fast mode) on `hosts` hosts (default `XLASIM_HOSTS`, else 1), or a named preset
    (`XLASIM_TOPOLOGY`, see `xlasim topologies`). f32 matmuls and convolutions compute as the
    TPU's MXU does at torch_xla's precision setting (`arithmetic="tpu"`, the default) or in the
    CPU's exact f32 (`"exact"`); default `XLASIM_ARITHMETIC` (docs/tpu-arithmetic.md).

    Call before the first use of an XLA device. Calling again with the same slice is a no-op.

    Args:
        devices: emulated cores (default `XLASIM_DEVICES`).
        processes: worker processes holding them (default `XLASIM_PROCESSES`, else one per
            core; 1: every core a thread of this process).
        hosts: emulated hosts (default `XLASIM_HOSTS`, else 1).
        topology: a named preset instead of the counts (`XLASIM_TOPOLOGY`; `xlasim topologies`
            lists them).
        arithmetic: how f32 matmuls and convolutions compute, `"tpu"` or `"exact"` (default
            `XLASIM_ARITHMETIC`, else `"tpu"`); set in the environment, so worker processes
            and later jobs inherit it.

    Returns:
        The emulated slice.

    Raises:
        DeviceCountError: an impossible count, or more cores than this machine's memory holds.
        RuntimeAlreadyStartedError: the XLA runtime, or emulation, already started otherwise.
        ValueError: an arithmetic other than `"tpu"` or `"exact"`.
    """
    started = emulated_slice.current()
    if emulated_slice.in_worker():  # the launching script, imported by a worker: its slice is
        return started  # the world's
    if arithmetic is not None:  # in the environment: worker processes and jobs inherit it
        os.environ[ARITHMETIC_ENV] = check_arithmetic(arithmetic, "arithmetic")
    wanted = _requested_topology(devices, processes, hosts, topology)
    if started is not None and wanted != started:
        raise RuntimeAlreadyStartedError(
            f"emulation already started as {started.describe()}, so it cannot become "
            f"{wanted.describe()}: the slice is chosen once per process, before the first launch "
            f"(by xlasim.emulate, {DEVICES_ENV}/{PROCESSES_ENV}, or the pytest/xlasim run options "
            "that called it first)"
        )
    platform = os.environ.get("PJRT_DEVICE", "CPU")
    if platform.split("_")[0] != "CPU":
        raise XlasimError(
            f"PJRT_DEVICE={platform} is set, but emulation runs on the XLA CPU device: unset it, "
            "or run natively (pytest --xla-backend=native) on a TPU VM"
        )
    # This (launching) process sees its host's cores, as on a TPU VM before xmp.spawn; worker
    # processes hold cores_per_process each. Threaded: every core.
    count = wanted.cores_per_host
    if "torch_xla" in sys.modules:
        _check_not_started(count)
    else:
        _choose_devices(count)  # before torch_xla's import picks a platform by itself
    if not wanted.threaded:
        from .ranks.zygote import zygote

        zygote()  # first: its imports (seconds) overlap this process's own, which follow
    from .ranks import launchers  # its world imports torch: after the zygote started

    emulated_slice.start(wanted)
    patches.install(launchers.patches)
    return wanted


def _check_not_started(count: int) -> None:
    """Choose the device count, or say why the runtime already started cannot have it."""
    import torch_xla

    if not torch_xla._XLAC._xla_runtime_is_initialized():
        _choose_devices(count)
        return
    started = torch_xla._XLAC._xla_get_devices()
    if len(started) != count or not all(d.startswith("CPU") for d in started):
        raise RuntimeAlreadyStartedError(
            f"the XLA runtime already started with {len(started)} device(s) {started[:4]}, "
            f"so it cannot emulate {count}. Activate emulation before the first use of an XLA "
            f"device: call xlasim.emulate(devices={count}) first thing, or set {DEVICES_ENV}="
            f"{count} (or CPU_NUM_DEVICES={count}) before starting Python."
        )


def _requested_topology(
    devices: int | None, processes: int | None, hosts: int | None, name: str | None
) -> Topology:
    name = name or os.environ.get(TOPOLOGY_ENV)
    if name:
        return _check_fits(preset(name))
    count = _requested(devices)
    return _check_fits(
        Topology(count, _whole(processes, PROCESSES_ENV), _whole(hosts, HOSTS_ENV) or 1)
    )


def _whole(value: int | None, env: str) -> int | None:
    if value is not None:
        return value
    raw = os.environ.get(env)
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise DeviceCountError(f"{env}={raw!r} is not a whole number") from None


def _choose_devices(count: int) -> None:
    os.environ["PJRT_DEVICE"] = "CPU"
    os.environ["CPU_NUM_DEVICES"] = str(count)


def topology() -> Topology:
    """The emulated slice; when none is yet, the one the environment names (`XLASIM_DEVICES`,
    `XLASIM_TOPOLOGY`), emulated now."""
    started = emulated_slice.current()
    if started is None and (os.environ.get(DEVICES_ENV) or os.environ.get(TOPOLOGY_ENV)):
        return emulate()
    return emulated_slice.topology()


def world() -> World:
    """The warm world of emulated ranks, started on first use (and closed at exit)."""
    from .ranks import warm_world

    if rank_context.current() is None and not emulated_slice.in_worker():
        topology()  # the environment's slice, emulated now (no slice: the error says how)
    return warm_world.world()
