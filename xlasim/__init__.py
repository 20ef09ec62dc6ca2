"""xlasim: an emulated multi-core XLA slice on torch_xla's CPU device.

import xlasim
xlasim.emulate(devices=8)          # before the first use of an XLA device
xmp.spawn(train, args=(...))       # runs train(rank, ...) on 8 emulated cores
"""

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .activation import emulate, max_devices, world
    from .base.emulated_slice import is_emulated
    from .base.errors import (
        CollectiveMismatchError,
        CollectiveTimeoutError,
        DeadlockError,
        DeviceCountError,
        MachineLostError,
        OutsideWorldError,
        PodJoinError,
        RankFailedError,
        RuntimeAlreadyStartedError,
        UnsupportedCollectiveError,
        WorldAbortedError,
        XlasimError,
    )
    from .base.rank_context import RankContext, current
    from .base.topology import Topology
    from .emulation.world_of_one import OutsideWorldWarning
    from .ranks.world import World

#: The public names and the modules they live in, imported on first use: importing the package
#: (as pytest does for the plugin in every session of an environment that has xlasim) must not
#: import torch until something is emulated.
_EXPORTS = {
    "emulate": "activation",
    "is_emulated": "base.emulated_slice",
    "max_devices": "activation",
    "world": "activation",
    "RankContext": "base.rank_context",
    "current": "base.rank_context",
    "CollectiveMismatchError": "base.errors",
    "CollectiveTimeoutError": "base.errors",
    "DeadlockError": "base.errors",
    "DeviceCountError": "base.errors",
    "MachineLostError": "base.errors",
    "OutsideWorldError": "base.errors",
    "PodJoinError": "base.errors",
    "RankFailedError": "base.errors",
    "RuntimeAlreadyStartedError": "base.errors",
    "UnsupportedCollectiveError": "base.errors",
    "WorldAbortedError": "base.errors",
    "XlasimError": "base.errors",
    "Topology": "base.topology",
    "World": "ranks.world",
    "OutsideWorldWarning": "emulation.world_of_one",
}

__all__ = [
    "CollectiveMismatchError",
    "CollectiveTimeoutError",
    "DeadlockError",
    "DeviceCountError",
    "MachineLostError",
    "OutsideWorldError",
    "OutsideWorldWarning",
    "PodJoinError",
    "RankContext",
    "RankFailedError",
    "RuntimeAlreadyStartedError",
    "Topology",
    "UnsupportedCollectiveError",
    "World",
    "WorldAbortedError",
    "XlasimError",
    "current",
    "emulate",
    "is_emulated",
    "max_devices",
    "world",
]


#: Public modules by the name users know them by (`xlasim.spmd.as_host`).
_MODULES = {"spmd": "emulation.spmd"}


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        module = importlib.import_module(f"{__name__}.{_MODULES[name]}")
        globals()[name] = module
        return module
    module = _EXPORTS.get(name)
    if module is None:  # a submodule: `xlasim.activation` after a bare `import xlasim`
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_MODULES})


class _Package(types.ModuleType):
    """`xlasim.world` is the function `xlasim.world()`, though `xlasim/ranks/world.py` is a submodule
    too: loading the submodule binds it on the package, which must not replace the function."""

    @property
    def world(self) -> Any:
        from .activation import world

        return world

    @world.setter
    def world(self, submodule: Any) -> None:
        pass  # the import system binding `xlasim.world` (the module) on its first load


sys.modules[__name__].__class__ = _Package
