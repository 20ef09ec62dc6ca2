"""A reference XLA training strategy (the API of Lightning's XLAStrategy, without Lightning),
a launcher on `xmp.spawn`, and a small trainer. Real torch_xla only: the same code runs on a TPU
VM and on cores emulated by xlasim. See docs/strategy.md."""

from .checkpoint_io import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointNotFoundError,
    XLACheckpointIO,
)
from .devices import DeviceSelectionError, available_devices, parse_devices
from .launcher import InProcessLauncher, XLALauncher
from .precision import Precision, select_precision
from .strategy import SingleDeviceXLAStrategy, XLAStrategy, strategy_for

__all__ = [
    "CheckpointCorruptError",
    "CheckpointError",
    "CheckpointNotFoundError",
    "DeviceSelectionError",
    "InProcessLauncher",
    "Precision",
    "SingleDeviceXLAStrategy",
    "XLACheckpointIO",
    "XLALauncher",
    "XLAStrategy",
    "available_devices",
    "parse_devices",
    "select_precision",
    "strategy_for",
]
