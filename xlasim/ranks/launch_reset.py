"""Every launch starts its ranks as fresh TPU processes would.

On a TPU VM each `xmp.spawn` starts new processes: no torch.distributed group, store or group
name survives from an earlier launch, environment changes made by ranks die with them, and the
CPU and XLA random generators start from a fresh process's state. Emulated ranks are warm
threads (of this process or of worker processes) reused from launch to launch, so what a fresh
process would not have is undone here, at the edges of each launch.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from contextlib import contextmanager, suppress


@contextmanager
def environment() -> Iterator[None]:
    """Undo the changes ranks make to `os.environ` once the launch is over."""
    saved = dict(os.environ)
    try:
        yield
    finally:
        restore_environment(saved)


def restore_environment(saved: dict[str, str]) -> None:
    """Make `os.environ` equal to `saved` again (touching only the names that differ)."""
    for name in set(os.environ) - set(saved):
        del os.environ[name]
    for name, value in saved.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def reseed_cpu_generators() -> None:
    """Fresh entropy for torch's, Python's and NumPy's CPU generators, as a new process gets
    (worker processes only: threads of one process share these, as on a TPU v2/v3 host)."""
    import numpy as np
    import torch

    torch.seed()
    random.seed()
    np.random.seed()


class DeviceGenerator:
    """A rank's XLA generator, put back to its fresh-process state before every job."""

    def __init__(self, device: str):
        import torch_xla.core.xla_model as xm

        self._device = device
        self._fresh = xm.get_rng_state(device)

    def reset(self) -> None:
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(self._fresh, self._device)


def release_process_groups() -> None:
    """Unregister the calling rank's torch.distributed groups, as its process's exit would.

    Group names live in a process-wide C++ table; a later launch that registers the same name
    would fail ("A process group is already registered under the name 0"). Only this rank's
    names are removed (`destroy_process_group()` would remove every rank's), and its registry
    belongs to the finished run, so the next launch starts with none.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if not dist.is_available() or not dist.is_initialized():
        return
    for group in list(c10d._world.pg_names):
        with suppress(RuntimeError, AttributeError):  # never registered under a name
            c10d._unregister_process_group(group.group_name)
