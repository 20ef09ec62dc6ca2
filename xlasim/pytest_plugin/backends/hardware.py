"""What accelerators this host has, asked without starting the XLA runtime.

The backend choice (`auto`: native when a TPU is attached) and the native backend (which
platform its workers use, how many devices they hold) ask before anything uses a device:
starting the runtime here would fix the device count, and on a TPU VM take the chips the
native backend's workers need.
"""

from __future__ import annotations

import glob
import os
import pathlib

import pytest

_GOOGLE_PCI_VENDOR = "0x1ae0"


def tpu_attached() -> bool:
    """A TPU chip on the PCI bus (torch_xla's own test, asked only if any Google device is there)."""
    vendors = glob.glob("/sys/bus/pci/devices/*/vendor")
    if not any(pathlib.Path(v).read_text().strip() == _GOOGLE_PCI_VENDOR for v in vendors):
        return False
    from torch_xla._internal import tpu

    return tpu.num_available_chips() > 0


def platform() -> str:
    """The PJRT platform the native workers will use; chosen here so torch_xla does not probe."""
    if not os.environ.get("PJRT_DEVICE"):
        os.environ["PJRT_DEVICE"] = "TPU" if tpu_attached() else "CPU"
    return os.environ["PJRT_DEVICE"]


def local_devices(name: str) -> int:
    """Devices of platform `name` on this host, counted without starting the XLA runtime."""
    if name == "CPU":
        return int(os.environ.get("CPU_NUM_DEVICES", "1"))
    if name == "TPU":
        from torch_xla._internal import tpu

        return tpu.num_available_devices()
    raise pytest.UsageError(
        f"xlasim: the native backend supports PJRT_DEVICE=TPU or CPU, not {name}"
    )
