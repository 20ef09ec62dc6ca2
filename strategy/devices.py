"""Which XLA cores a run uses: `devices=1`, `8`, `[i]` or `"auto"`, checked before anything starts.

The count of cores is read without starting the XLA runtime, because `xmp.spawn` refuses to run
once the parent process has touched a device. A host runs one replica per core, so a multi-core
run always uses every core of the host: a count between 1 and all of them is an error, not a
silent subset.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

DevicesArg = int | str | Sequence[int]


class DeviceSelectionError(ValueError):
    """`devices` names cores that this host does not have, or in a form XLA cannot run."""


def available_devices() -> int:
    """XLA cores on this host, without starting the runtime (0 when no XLA platform is set up).

    `PJRT_DEVICE=TPU` (or an attached TPU) counts TPU cores as torch_xla does before spawning;
    `PJRT_DEVICE=CPU` counts `CPU_NUM_DEVICES` (what xlasim's emulation sets).
    """
    platform = os.environ.get("PJRT_DEVICE", "").upper()
    if platform == "CPU":
        return int(os.environ.get("CPU_NUM_DEVICES", "1"))
    if platform in ("TPU", ""):
        from torch_xla._internal import tpu

        # num_available_devices() also asks the TPU version (metadata server): only with chips.
        return tpu.num_available_devices() if tpu.num_available_chips() else 0
    return 0


def _usage(available: int) -> str:
    return (
        f"use devices=1, devices={available} (every core), devices=[i] with 0 <= i < {available} "
        "(one chosen core) or devices='auto'"
    )


def parse_devices(devices: DevicesArg, available: int | None = None) -> list[torch.device]:
    """The XLA devices `devices` selects on this host, or a `DeviceSelectionError` saying why not."""
    available = available_devices() if available is None else available
    if available < 1:
        raise DeviceSelectionError(
            f"devices={devices!r}: no XLA device on this machine (PJRT_DEVICE="
            f"{os.environ.get('PJRT_DEVICE', '<unset>')}). On a TPU VM set PJRT_DEVICE=TPU; on a "
            "CPU machine emulate cores first with xlasim.emulate(devices=N)."
        )
    if devices == "auto":
        return [torch.device("xla", i) for i in range(available)]
    if isinstance(devices, bool) or not isinstance(devices, (int, list, tuple)):
        raise DeviceSelectionError(f"devices={devices!r} is not understood: {_usage(available)}")
    if isinstance(devices, int):
        if devices == 1:
            return [torch.device("xla", 0)]
        if devices == available:
            return [torch.device("xla", i) for i in range(available)]
        raise DeviceSelectionError(
            f"devices={devices}: this host has {available} XLA cores and runs either one of them "
            f"or all of them; {_usage(available)}"
        )
    if len(devices) != 1 or isinstance(devices[0], bool) or not isinstance(devices[0], int):
        raise DeviceSelectionError(
            f"devices={devices!r}: a list selects exactly one core by index; {_usage(available)}"
        )
    index = devices[0]
    if not 0 <= index < available:
        raise DeviceSelectionError(
            f"devices={devices!r}: core {index} does not exist, this host has cores "
            f"0..{available - 1}; {_usage(available)}"
        )
    return [torch.device("xla", index)]
