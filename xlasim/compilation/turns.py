"""Ranks sharing a process take turns at launching graphs, so each graph compiles once there.

torch_xla's compilation cache is per process and keyed without the device: in a process of
several devices every executable is compiled replicated over all of them, so a graph traced on
`xla:0` and the same graph traced on `xla:1` share one executable. But the cache knows no
compilation in flight: ranks that launch the same new graph at the same moment all miss it and
each compiles its own copy (8 rank threads, 2 graphs: 16 compilations; docs/compilation.md).

So a rank of a process holding several ranks (threads mode, TPU v2/v3 hosts' 2-core processes)
takes its process's turn while torch_xla traces, looks up, compiles and schedules its graph;
the next rank launching the same graph then finds it compiled. Waiting for the execution
(`wait=True`) happens after the turn is released, so the ranks' programs still run side by side.
Nothing about a graph changes: the same calls cut the same graphs, with the same executables
torch_xla would pick for them once compiled; only who compiles first is decided.

Off by default; `XLASIM_SHARE_COMPILATIONS=1` turns it on. The reason is upstream: torch_xla's
key ignores which inputs a graph shares (pytorch/xla #8353), so when ranks launch graphs that
differ only in that at the same moment, the later ranks get the first one's executable and
compute wrong values; racing, each compiled its own (measured: 60 of 120 rank results wrong
with turns, none without; docs/compilation.md). Graphs launched again hit the cache either way.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

from ..base import rank_context

SWITCH = "XLASIM_SHARE_COMPILATIONS"
_turn = threading.Lock()


def enabled() -> bool:
    """Whether ranks of one process take turns: `XLASIM_SHARE_COMPILATIONS=1` (off by default)."""
    return os.environ.get(SWITCH, "0").strip().lower() in ("1", "true", "yes", "on")


def _shares_its_process() -> bool:
    """Whether the calling thread is a rank whose process holds other ranks of its run."""
    if not enabled():
        return False
    rank = rank_context.current()
    return rank is not None and rank.addressable_device_count > 1


def _wait_for(devices: Sequence[str]) -> None:
    """Wait for everything launched on `devices` (torch names, `xla:1`) to have run."""
    import torch_xla

    runtime_names = torch_xla._XLAC._xla_real_devices(sorted(set(devices)))
    torch_xla._XLAC._xla_wait_device_ops(devices=runtime_names)


def _step_marker(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def step_marker(
        device: str = "", devices: Sequence[str] = (), wait: bool = True, reset_scope: bool = True
    ) -> None:
        if not _shares_its_process():
            return original(device, devices, wait=wait, reset_scope=reset_scope)
        import torch_xla

        with _turn:
            original(device, devices, wait=False, reset_scope=reset_scope)
        if wait:
            _wait_for([device or str(torch_xla._XLAC._xla_get_default_device())])

    return step_marker


def _sync_multi(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def sync_multi(
        tensors: Sequence[Any],
        devices: Sequence[str] = (),
        wait: bool = True,
        sync_xla_data: bool = True,
    ) -> None:
        if not _shares_its_process():
            return original(tensors, devices, wait=wait, sync_xla_data=sync_xla_data)
        with _turn:
            original(tensors, devices, wait=False, sync_xla_data=sync_xla_data)
        devices_used = [str(t.device) for t in tensors if t.device.type == "xla"]
        if wait and devices_used:
            _wait_for(devices_used)

    return sync_multi


def patches() -> list[tuple[Any, str, Any]]:
    """torch_xla's two graph launches (`torch_xla.sync` and `xm.mark_step` call the first;
    `xm.save`, `xm.unlazy` and the emulated collectives' host copies the second)."""
    import torch_xla

    xlac = torch_xla._XLAC
    return [
        (xlac, "_xla_step_marker", _step_marker(xlac._xla_step_marker)),
        (xlac, "_xla_sync_multi", _sync_multi(xlac._xla_sync_multi)),
    ]
