"""Installing the emulation into torch_xla and torch.distributed (once per process).

Everything is patched at the module attribute real code looks up at call time
(`xm.all_reduce`, `xr.world_size`, `xmp.spawn`...), so torch_xla's own helpers built on them
(`xm.optimizer_step`, `xm.mesh_reduce`, `torch_xla.launch`, the differentiable collectives in
`torch_xla.core.functions`, the `xla` process group) use the emulation without being touched.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

_MISSING = object()
_applied: list[tuple[Any, str, Any]] = []


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


def _targets() -> list[tuple[Any, str, Any]]:
    import torch_xla.core.xla_model as xm
    import torch_xla.distributed.xla_multiprocessing as xmp
    import torch_xla.runtime as xr
    from torch_xla._internal import pjrt

    from ..compilation import turns
    from ..ranks import launchers
    from ..reports import traced_counters
    from . import collectives, compiled, distributed, queries, seeding, spmd, world_of_one

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
    cores = queries.slice_cores()
    for name in (
        "all_reduce",
        "all_gather",
        "reduce_scatter",
        "all_to_all",
        "collective_permute",
        "collective_broadcast",
        "send",
        "recv",
        "xla_rendezvous",
        "rendezvous",
    ):
        emulated = getattr(collectives, name)
        targets.append(
            (
                xm,
                name,
                world_of_one.or_world_of_one(emulated, getattr(xm, name), f"xm.{name}", cores),
            )
        )
    targets += [
        (xmp, "spawn", launchers.spawn),
        (pjrt, "spawn", launchers.pjrt_spawn),
        (pjrt, "run_multiprocess", launchers.run_multiprocess),
        (pjrt, "spawn_threads", launchers.spawn_threads),
    ]
    targets += distributed.patches()
    targets += seeding.patches()
    targets += compiled.patches()
    targets += traced_counters.patches()
    targets += spmd.patches()
    targets += turns.patches()
    return targets


def install() -> None:
    """Apply every patch once; a second call is a no-op."""
    if _applied:
        return
    for owner, name, replacement in _targets():
        _applied.append((owner, name, _get(owner, name)))
        _set(owner, name, replacement)
    from ..tpu import arithmetic

    arithmetic.install()
