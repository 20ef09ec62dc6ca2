"""xlasim: an emulated multi-core XLA slice on torch_xla's CPU device.

import xlasim
xlasim.emulate(devices=8)          # before the first use of an XLA device
xmp.spawn(train, args=(...))       # runs train(rank, ...) on 8 emulated cores
"""

from .activation import emulate, is_emulated, max_devices, world
from .context import RankContext, current
from .errors import (
    CollectiveMismatchError,
    CollectiveTimeoutError,
    DeadlockError,
    DeviceCountError,
    OutsideWorldError,
    RankFailedError,
    RuntimeAlreadyStartedError,
    WorldAbortedError,
    XlasimError,
)
from .topology import Topology
from .world import World

__all__ = [
    "CollectiveMismatchError",
    "CollectiveTimeoutError",
    "DeadlockError",
    "DeviceCountError",
    "OutsideWorldError",
    "RankContext",
    "RankFailedError",
    "RuntimeAlreadyStartedError",
    "Topology",
    "World",
    "WorldAbortedError",
    "XlasimError",
    "current",
    "emulate",
    "is_emulated",
    "max_devices",
    "world",
]
