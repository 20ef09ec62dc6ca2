"""How many ranks a test runs on, and why a session's slice cannot run it (its size skips)."""

from __future__ import annotations

import pytest

from ..session import executor
from . import marker_args

SIZE_PARAM = "_xla_world_size"
#: Tests skipped for the slice's size, by why: {"need 8 cores": 12, ...} (see `reporting`).
size_skips_key = pytest.StashKey[dict[str, int]]()


def world_size(item: pytest.Item) -> int:
    """How many ranks a marked test runs on."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None and SIZE_PARAM in callspec.params:
        return callspec.params[SIZE_PARAM]
    devices = marker_args.devices(item.get_closest_marker("xla"))  # type: ignore[arg-type]
    return executor(item.config).size if devices is None else devices  # type: ignore[return-value]


def least_devices(item: pytest.Item) -> int | None:
    """The least number of cores a test runs on (`xla(min_devices=N)`, `xla_min_devices(N)`)."""
    found = [
        marker_args.min_devices(mark)
        for name in ("xla", "xla_min_devices")
        for mark in item.iter_markers(name)
    ]
    found = [n for n in found if n is not None]
    return max(found) if found else None


def size_skip(item: pytest.Item, available: int, sub_worlds: bool, backend: str):
    """Why this session's slice cannot run the test, as (tally key, reason), or None.

    Args:
        item: the collected test, read for its `xla` and `xla_min_devices` markers.
        available: how many ranks (cores) the session's slice has.
        sub_worlds: whether the backend can run a test on fewer ranks than it has.
        backend: the backend's name ("emulated" or "native"), for the reason's text.
    """
    least = least_devices(item)
    if least is not None and least > available:
        return (
            f"need at least {least} cores",
            f"needs at least {least} XLA cores, this session has {available} "
            f"(--xla-devices={least} or more to run it)",
        )
    if item.get_closest_marker("xla") is None:
        return None
    needed = world_size(item)
    if needed > available:
        return (
            f"need exactly {needed} cores",
            f"needs {needed} XLA cores, this session has {available} "
            f"(--xla-devices={needed} or more to run it)",
        )
    if needed < available and not sub_worlds:
        cores = f"{needed} core{'s' if needed != 1 else ''}"
        return (
            f"run on a sub-world of {cores}",
            f"runs on a sub-world of {cores}; the {backend} backend "
            f"runs every one of its {available} cores",
        )
    return None
