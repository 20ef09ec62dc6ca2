"""Turning emulation on: choose the device count before torch_xla's runtime starts, then patch.

The XLA CPU client reads `PJRT_DEVICE` and `CPU_NUM_DEVICES` once, when the runtime starts (the
first use of a device). After that the count is fixed, so activating too late is an error that
says how to fix it rather than a world of the wrong size.
"""

from __future__ import annotations

import atexit
import os
import sys

from . import patches
from .errors import DeviceCountError, RuntimeAlreadyStartedError, XlasimError
from .topology import Topology, preset
from .world import World

DEVICES_ENV = "XLASIM_DEVICES"
PROCESSES_ENV = "XLASIM_PROCESSES"
HOSTS_ENV = "XLASIM_HOSTS"
TOPOLOGY_ENV = "XLASIM_TOPOLOGY"
#: Resident memory budgeted per emulated core. An idle core costs ~1.3 MiB (a world of 64 cores
#: after an all_reduce: 870 MB RSS, 790 MB of it torch + torch_xla); the rest is room for each
#: core's own compiled programs and buffers. It bounds how many cores a machine can hold.
BYTES_PER_DEVICE = 48 * 2**20
HARD_MAX_DEVICES = 1024

_topology: Topology | None = None
_process_host = 0
_world: World | None = None


def max_devices() -> int:
    """How many cores this machine can hold: available memory over the per-core cost."""
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return HARD_MAX_DEVICES
    return max(1, min(HARD_MAX_DEVICES, available // BYTES_PER_DEVICE))


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
    limit = max_devices()
    if devices > limit:
        raise DeviceCountError(
            f"{devices} emulated cores do not fit this machine: at ~{BYTES_PER_DEVICE >> 20} MiB "
            f"each, its available memory holds at most {limit}"
        )
    return devices


def emulate(
    devices: int | None = None,
    processes: int | None = None,
    hosts: int | None = None,
    topology: str | None = None,
) -> Topology:
    """Emulate a slice: `devices` cores (default `XLASIM_DEVICES`) in `processes` worker processes
    (default `XLASIM_PROCESSES`, else 1: every core a thread of this process) on `hosts` hosts
    (default `XLASIM_HOSTS`, else 1), or a named preset (`XLASIM_TOPOLOGY`, see `xlasim topologies`).

    Call before the first use of an XLA device. Calling again with the same slice is a no-op.
    """
    global _topology
    wanted = _requested_topology(devices, processes, hosts, topology)
    platform = os.environ.get("PJRT_DEVICE", "CPU")
    if platform.split("_")[0] != "CPU":
        raise XlasimError(
            f"PJRT_DEVICE={platform} is set, but emulation runs on the XLA CPU device: unset it, "
            "or run natively (pytest --xla-backend=native) on a TPU VM"
        )
    # This (launching) process sees its host's cores, as on a TPU VM before xmp.spawn; worker
    # processes hold cores_per_process each. Threaded: every core.
    count = wanted.cores_per_host
    if "torch_xla" not in sys.modules:
        _choose_devices(count)  # before torch_xla's import picks a platform by itself
    import torch_xla

    if torch_xla._XLAC._xla_runtime_is_initialized():
        started = torch_xla._XLAC._xla_get_devices()
        if wanted.threaded and (
            len(started) != count or not all(d.startswith("CPU") for d in started)
        ):
            raise RuntimeAlreadyStartedError(
                f"the XLA runtime already started with {len(started)} device(s) {started[:4]}, "
                f"so it cannot emulate {count}. Activate emulation before the first use of an XLA "
                f"device: call xlasim.emulate(devices={count}) first thing, or set {DEVICES_ENV}="
                f"{count} (or CPU_NUM_DEVICES={count}) before starting Python."
            )
    else:
        _choose_devices(count)
    _topology = wanted
    patches.install()
    return _topology


def _requested_topology(
    devices: int | None, processes: int | None, hosts: int | None, name: str | None
) -> Topology:
    name = name or os.environ.get(TOPOLOGY_ENV)
    if name:
        return preset(name)
    count = _requested(devices)
    return Topology(count, _whole(processes, PROCESSES_ENV), _whole(hosts, HOSTS_ENV))


def _whole(value: int | None, env: str) -> int:
    if value is not None:
        return value
    raw = os.environ.get(env, "1")
    try:
        return int(raw)
    except ValueError:
        raise DeviceCountError(f"{env}={raw!r} is not a whole number") from None


def enter_worker(topology: Topology, host: int) -> None:
    """Mark this process as a worker of a multi-process world on emulated host `host` (its
    ranks are its threads)."""
    global _topology, _process_host
    _topology = topology
    _process_host = host


def process_host() -> int:
    """The emulated host this process belongs to (the launching process is on host 0)."""
    return _process_host


def _choose_devices(count: int) -> None:
    os.environ["PJRT_DEVICE"] = "CPU"
    os.environ["CPU_NUM_DEVICES"] = str(count)


def is_emulated() -> bool:
    return _topology is not None


def topology() -> Topology:
    if _topology is None:
        if os.environ.get(DEVICES_ENV) or os.environ.get(TOPOLOGY_ENV):
            return emulate()
        raise XlasimError(
            f"emulation is not active: call xlasim.emulate(devices=N) or set {DEVICES_ENV}=N"
        )
    return _topology


def world() -> World:
    """The warm world of emulated ranks, started on first use (and closed at exit)."""
    global _world
    if _world is None or _world.topology != topology():
        if _world is None:
            atexit.register(close_world)
        _world = World(topology())
    return _world


def close_world() -> list[int]:
    """Stop the world's ranks before the interpreter finalizes: a rank thread still inside
    XLA's native code at that point would abort the process. Returns the ranks that could not
    be stopped."""
    global _world
    if _world is None:
        return []
    stuck, _world = _world.close(), None
    return stuck
