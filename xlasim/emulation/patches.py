"""Installing the emulation into torch_xla and torch.distributed (once per process).

Everything is patched at the module attribute real code looks up at call time
(`xm.all_reduce`, `xr.world_size`, `xmp.spawn`...), so torch_xla's own helpers built on them
(`xm.optimizer_step`, `xm.mesh_reduce`, `torch_xla.launch`, the differentiable collectives in
`torch_xla.core.functions`, the `xla` process group) use the emulation without being touched.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from types import FunctionType
from typing import Any

from ..base import forks
from ..base.host_memory import available_memory

_MISSING = object()
#: (owner, attribute or key, replacement): one patch, as each module of the emulation lists them.
Patch = tuple[Any, str, Any]


@dataclass(frozen=True)
class Replaced:
    """An installed patch: `owner`'s `name` (an attribute, or a key of a mapping) was
    `original` and is `replacement`."""

    owner: Any
    name: str
    original: Any
    replacement: Any


_installed: list[Replaced] = []
_more: tuple[Callable[[], list[Patch]], ...] = ()


def _get(owner: Any, name: str) -> Any:
    if isinstance(owner, MutableMapping):
        return owner.get(name, _MISSING)
    return (
        owner.__dict__.get(name, _MISSING)
        if isinstance(owner, type)
        else getattr(owner, name, _MISSING)
    )


def _set(owner: Any, name: str, value: Any) -> None:
    if isinstance(owner, MutableMapping):
        owner[name] = value
    else:
        setattr(owner, name, value)


def _targets() -> list[Patch]:
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    from ..compilation import turns
    from ..reports import traced_counters
    from ..tpu import arithmetic, memory
    from . import compiled, distributed, queries, seeding, spmd, world_of_one
    from .collectives import REGISTRY

    runtime_originals = {
        name: getattr(xr, name)
        for name in (
            "world_size",
            "global_ordinal",
            "local_ordinal",
            "local_device_count",
            "addressable_device_count",
            "global_device_count",
            "process_index",
            "process_count",
            "host_index",
            "local_process_count",
            "device_type",
            "set_device_type",
        )
    }
    targets = [(xr, name, fn) for name, fn in queries.runtime_queries(runtime_originals).items()]
    targets += queries.identity_patches()
    targets.append(
        (xm, "get_xla_supported_devices", queries.supported_devices(xm.get_xla_supported_devices))
    )
    # once per process in torch_xla: in a child forked after the runtime started, done already
    targets.append(
        (
            xr,
            "initialize_cache",
            forks.refusing_after_fork(xr.initialize_cache, "xr.initialize_cache"),
        )
    )
    cores = queries.slice_cores()
    for name, collective in REGISTRY.items():
        emulated = collective.xm_function()
        targets.append(
            (
                xm,
                name,
                world_of_one.or_world_of_one(emulated, getattr(xm, name), f"xm.{name}", cores),
            )
        )
    targets += distributed.patches(cores)
    targets += seeding.patches()
    targets += compiled.patches()
    targets += traced_counters.patches()
    targets += spmd.patches()
    targets += turns.patches()
    targets += memory.patches()
    targets += arithmetic.patches()
    return targets


def install(*more: Callable[[], list[Patch]]) -> None:
    """Apply every patch once; a second call is a no-op.

    Args:
        more: functions listing patches of the layers above the emulation (torch_xla's
            launchers, which run on the ranks' world: `ranks/launchers.py`); the worker
            processes of this process's worlds install them too (`installed_with`).
    """
    global _more
    if _installed:
        return
    import torch_xla

    from ..tpu import arithmetic, memory
    from . import queries

    _more = more
    for owner, name, replacement in _targets() + [t for listed in more for t in listed()]:
        if owner is torch_xla._XLAC and name == "_xla_step_marker":
            # around compilation/turns.py's step marker: the HBM is checked before a turn
            replacement = memory.guarded_step_marker(replacement)
        if owner is torch_xla._XLAC and name in ("_xla_step_marker", "_xla_sync_multi"):
            # graphs executed in a child forked after the runtime started never finish
            replacement = forks.refusing_after_fork(
                replacement, f"a graph execution (torch_xla._XLAC.{name})"
            )
        original = _get(owner, name)
        _installed.append(Replaced(owner, name, original, replacement))
        _set(owner, name, replacement)
        _pickle_as(original, replacement)
    arithmetic.install()
    memory.configure(queries.hbm_per_device(), available_memory)


def _pickle_as(original: Any, replacement: Any) -> None:
    """Let a replaced module function pickle by reference as the original does: pickle finds a
    function by `__module__` and `__qualname__`, which now lead to the replacement. Without it
    `ProcessPoolExecutor().submit(xm.get_xla_supported_devices)`, as torch_xla's
    `pjrt/test_runtime_tpu.py` does, fails with "Can't pickle local object"."""
    if not (isinstance(original, FunctionType) and isinstance(replacement, FunctionType)):
        return
    module = sys.modules.get(original.__module__)
    if module is not None and getattr(module, original.__qualname__, None) is replacement:
        replacement.__module__ = original.__module__
        replacement.__qualname__ = original.__qualname__


def installed() -> list[Replaced]:
    """Every patch this process installed, with the original it replaced (docs/compat.md lists
    each; tests/core/test_compat.py checks the list against the table and the signatures)."""
    return list(_installed)


def installed_with() -> tuple[Callable[[], list[Patch]], ...]:
    """The patch lists of the layers above this process installed (`install`'s `more`): a
    worker process emulates what its launching process does, and is handed these by name."""
    return _more
