"""A reference XLA training strategy (the API of Lightning's XLAStrategy, without Lightning),
a launcher on `xmp.spawn`, and a small trainer. Real torch_xla only: the same code runs on a TPU
VM and on cores emulated by xlasim. See docs/strategy.md.

The names below are imported on first use: importing the package must not import torch_xla,
which picks its platform at import, so that `python -m strategy.demo` can emulate cores first.
"""

from importlib import import_module
from typing import Any

_EXPORTS = {
    "CheckpointCorruptError": "checkpoint_io",
    "CheckpointError": "checkpoint_io",
    "CheckpointNotFoundError": "checkpoint_io",
    "XLACheckpointIO": "checkpoint_io",
    "DeviceSelectionError": "devices",
    "available_devices": "devices",
    "parse_devices": "devices",
    "InProcessLauncher": "launching",
    "XLALauncher": "launching",
    "TrainingModule": "module",
    "Precision": "precision",
    "select_precision": "precision",
    "SPMDStrategy": "spmd",
    "SingleDeviceXLAStrategy": "strategy",
    "XLAStrategy": "strategy",
    "strategy_for": "strategy",
    "FitResult": "trainer",
    "Trainer": "trainer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'strategy' has no attribute {name!r}")
    return getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
