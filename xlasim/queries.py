"""Runtime queries answered as on a TPU slice of the emulated topology.

Inside a rank, the answers come from the rank's context (so a sub-world of 4 ranks reports a
world size of 4, and ranks of a two-host slice see their own host's local ordinals). Outside any
rank, everything falls through to torch_xla.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import context

DEVICE_TYPE = "TPU"


def _in_rank(answer: Callable[[context.RankContext], Any], original: Callable[..., Any]):
    def query(*args: Any, **kwargs: Any) -> Any:
        ctx = context.current()
        return original(*args, **kwargs) if ctx is None else answer(ctx)

    query.__name__ = original.__name__
    query.__doc__ = original.__doc__
    query.__wrapped__ = original
    return query


def runtime_queries(originals: dict[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """Replacements for `torch_xla.runtime` functions, built around the originals."""
    answers: dict[str, Callable[[context.RankContext], Any]] = {
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
    replaced["get_master_ip"] = lambda: "127.0.0.1"
    return replaced


def supported_devices(original: Callable[..., list[str]]) -> Callable[..., list[str]]:
    """xm.get_xla_supported_devices: a rank sees only the devices of its (sub-)world."""

    def get_xla_supported_devices(max_devices: int | None = None) -> list[str]:
        ctx = context.current()
        if ctx is None:
            return original(max_devices)
        devices = [f"xla:{i}" for i in range(ctx.addressable_device_count)]
        return devices[:max_devices] if max_devices else devices

    return get_xla_supported_devices
