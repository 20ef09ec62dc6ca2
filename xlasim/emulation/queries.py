"""Runtime and hardware queries answered as on a TPU slice of the emulated topology.

Inside a rank, the rank's place in the world comes from its context (so a sub-world of 4 ranks
reports a world size of 4, and ranks of a two-host slice see their own host's local ordinals);
outside any rank those fall through to torch_xla. What the hardware is (device type, device
kind, the TPU metadata, device attributes, memory) is the slice's identity everywhere in an
emulating process, ranks or not, as on a TPU VM.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from ..base import emulated_slice, rank_context
from ..base.identity import Identity
from ..tpu import memory

DEVICE_TYPE = "TPU"


def _in_rank(answer: Callable[[rank_context.RankContext], Any], original: Callable[..., Any]):
    def query(*args: Any, **kwargs: Any) -> Any:
        ctx = rank_context.current()
        return original(*args, **kwargs) if ctx is None else answer(ctx)

    query.__name__ = original.__name__
    query.__doc__ = original.__doc__
    query.__wrapped__ = original
    return query


def runtime_queries(originals: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """Replacements for `torch_xla.runtime` functions, built around the originals."""
    answers: dict[str, Callable[[rank_context.RankContext], Any]] = {
        "world_size": lambda c: c.world_size,
        "global_ordinal": lambda c: c.rank,
        "local_ordinal": lambda c: c.local_rank,
        "local_device_count": lambda c: c.local_device_count,
        "addressable_device_count": lambda c: c.addressable_device_count,
        "global_device_count": lambda c: c.world_size,
        "process_index": lambda c: c.process_index,
        "process_count": lambda c: c.process_count,
        "host_index": lambda c: c.host_index,
        "local_process_count": lambda c: c.local_process_count,
    }
    replaced = {name: _in_rank(answer, originals[name]) for name, answer in answers.items()}
    replaced["device_type"] = lambda: DEVICE_TYPE
    replaced["set_device_type"] = _set_device_type(originals["set_device_type"])
    return replaced


def _set_device_type(original: Callable[[str], None]) -> Callable[[str], None]:
    """xr.set_device_type: asking an emulated slice for the TPU it already is changes nothing,
    as on a TPU VM (whose environment says TPU), also after the runtime started; the CPU client
    underneath stays. Any other type goes to torch_xla, which refuses a change once the runtime
    runs. torch_xla's TPU tests ask for it in setUp (pjrt/test_runtime_tpu.py)."""

    def set_device_type(pjrt_device: str) -> None:
        if pjrt_device != DEVICE_TYPE:
            original(pjrt_device)

    set_device_type.__wrapped__ = original
    return set_device_type


def supported_devices(original: Callable[..., list[str]]) -> Callable[..., list[str]]:
    """xm.get_xla_supported_devices: a rank sees only the devices of its (sub-)world."""

    def get_xla_supported_devices(max_devices: int | None = None) -> list[str]:
        ctx = rank_context.current()
        if ctx is None:
            return original(max_devices)
        devices = [f"xla:{i}" for i in range(ctx.addressable_device_count)]
        return devices[:max_devices] if max_devices else devices

    return get_xla_supported_devices


# ------------------------------------------------------------------------------ identity


def _identity() -> Identity:
    return Identity.of(emulated_slice.topology())


def hbm_per_device() -> int:
    """The emulated generation's HBM per XLA device (a TensorCore, or a megacore chip)."""
    return _identity().generation.memory_per_core


def slice_cores() -> int:
    """How many cores the emulated slice has."""
    return _identity().topology.devices


def _host() -> int:
    """The emulated host this code runs on: the rank's, else this process's."""
    ctx = rank_context.current()
    return ctx.host_index if ctx is not None else emulated_slice.process_host()


def _ordinal(device: Any) -> int:
    match = re.fullmatch(r"xla:(\d+)", str(device))
    if match is None:
        raise RuntimeError(f"Invalid device format: {device}")
    return int(match.group(1))


def identity_patches() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) triples that make torch_xla see the slice's TPUs.

    `torch_xla._internal.tpu` reads everything from three sources: the `tpu-env` metadata, the
    worker list and the chips on the PCI bus; answering those three makes `version()`,
    `worker_id()`, `num_tpu_workers()`, `num_local_processes()`... follow. Real device names
    become `TPU:i`, except where torch_xla matches them against the CPU client's own device list
    (`xla_replication_devices`), which keeps seeing the names the client knows.
    """
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr
    from torch_xla._internal import tpu

    native_names = threading.local()
    real_device = xm._xla_real_device
    replication_devices = xm.xla_replication_devices

    def _xla_real_device(device: Any) -> str:
        name = real_device(device)
        if getattr(native_names, "on", False):
            return name
        return f"{DEVICE_TYPE}:{name.split(':', 1)[1]}"

    def xla_replication_devices(local_devices: Any = None) -> list[str]:
        native_names.on = True
        try:
            return replication_devices(local_devices)
        finally:
            native_names.on = False

    def real_devices() -> list[str]:
        return xm.xla_real_devices()

    def xla_device_kind(device: Any = None) -> str:
        return _identity().generation.device_kind

    def get_tpu_env() -> dict[str, str]:
        return _identity().tpu_env(_host())

    def get_worker_ips() -> list[str]:
        hostnames = _identity().worker_hostnames()
        return hostnames if len(hostnames) > 1 else ["localhost"]

    def num_available_chips() -> int:
        return _identity().chips_per_host

    def global_runtime_device_attributes() -> list[dict[str, object]]:
        identity = _identity()
        return [
            {**identity.device_attributes(i), "name": identity.device_name(i)}
            for i in range(identity.topology.devices)
        ]

    def runtime_device_attributes(device: str) -> dict[str, object]:
        return _identity().device_attributes(_ordinal(device))

    return [
        (xm, "_xla_real_device", _xla_real_device),
        (xm, "xla_replication_devices", xla_replication_devices),
        (xm, "xla_device_kind", xla_device_kind),
        (xm, "get_memory_info", memory.memory_info),
        (torch_xla, "real_devices", real_devices),
        (tpu, "get_tpu_env", get_tpu_env),
        (tpu, "get_worker_ips", get_worker_ips),
        (tpu, "num_available_chips", num_available_chips),
        (xr, "global_runtime_device_attributes", global_runtime_device_attributes),
        (xr, "runtime_device_attributes", runtime_device_attributes),
    ]
