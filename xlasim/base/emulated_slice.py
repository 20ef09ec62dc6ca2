"""The slice this process emulates, and which of its hosts the process is on.

Set once per process: by `xlasim.emulate` in the launching process, by a worker process as it
starts (`ranks/worker.py`) and by an SPMD world (`emulation/spmd.py`); read by the emulation's
answers (runtime queries, the TPU identity, compile limits) and the process's warm world. The
entry point that sets it from the environment is `xlasim.activation`; this module only holds it,
so every layer can read it without importing the one that installs the emulation.
"""

from __future__ import annotations

from .errors import XlasimError
from .topology import Topology

#: The environment variable that names the device count (read by `xlasim.activation`).
DEVICES_ENV = "XLASIM_DEVICES"

_topology: Topology | None = None
_process_host = 0
_in_worker = False


def start(topology: Topology) -> None:
    """Record that this (launching) process emulates `topology`."""
    global _topology
    _topology = topology


def current() -> Topology | None:
    """The emulated slice, or None when this process emulates none."""
    return _topology


def topology() -> Topology:
    """The emulated slice; an error naming the fix when there is none."""
    if _topology is None:
        raise XlasimError(
            f"emulation is not active: call xlasim.emulate(devices=N) or set {DEVICES_ENV}=N"
        )
    return _topology


def is_emulated() -> bool:
    return _topology is not None


def in_worker() -> bool:
    """Whether this process is a worker of a multi-process world (or an SPMD world's process)."""
    return _in_worker


def enter_worker(topology: Topology, host: int) -> None:
    """Mark this process as a worker of a multi-process world on emulated host `host` (its
    ranks are its threads).

    Args:
        topology: the slice the world emulates, which this process now answers for.
        host: the emulated host this process's ranks are on (0 for an SPMD world's process).
    """
    global _topology, _process_host, _in_worker
    _topology = topology
    _process_host = host
    _in_worker = True


def process_host() -> int:
    """The emulated host this process belongs to (the launching process is on host 0)."""
    return _process_host


def move_to_host(host: int) -> int:
    """Make this process answer as emulated host `host` (an SPMD world acting for one host of
    its pod, `spmd.as_host`); returns the host it answered as before."""
    global _process_host
    previous, _process_host = _process_host, host
    return previous
