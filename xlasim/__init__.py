"""xlasim: an emulated multi-core XLA slice on torch_xla's CPU device.

import xlasim
xlasim.emulate(devices=8)          # before the first use of an XLA device
xmp.spawn(train, args=(...))       # runs train(rank, ...) on 8 emulated cores
"""

import importlib
from typing import TYPE_CHECKING, Any

# For type checkers and IDEs, which cannot follow `__getattr__`: `name as name` is an explicit
# re-export (PEP 484). The same names and modules as `_EXPORTS` (tests/test_packaging.py).
if TYPE_CHECKING:
    from .activation import emulate as emulate
    from .activation import max_devices as max_devices
    from .activation import world as world
    from .base.emulated_slice import is_emulated as is_emulated
    from .base.errors import CollectiveMismatchError as CollectiveMismatchError
    from .base.errors import CollectiveTimeoutError as CollectiveTimeoutError
    from .base.errors import DeadlockError as DeadlockError
    from .base.errors import DeviceCountError as DeviceCountError
    from .base.errors import MachineLostError as MachineLostError
    from .base.errors import OutsideWorldError as OutsideWorldError
    from .base.errors import PodJoinError as PodJoinError
    from .base.errors import RankExitError as RankExitError
    from .base.errors import RankFailedError as RankFailedError
    from .base.errors import RuntimeAlreadyStartedError as RuntimeAlreadyStartedError
    from .base.errors import ScheduleStalledError as ScheduleStalledError
    from .base.errors import UnsupportedCollectiveError as UnsupportedCollectiveError
    from .base.errors import WorldAbortedError as WorldAbortedError
    from .base.errors import XlasimError as XlasimError
    from .base.rank_context import RankContext as RankContext
    from .base.rank_context import current as current
    from .base.topology import Topology as Topology
    from .emulation.spmd import SpmdRefusedError as SpmdRefusedError
    from .emulation.world_of_one import OutsideWorldWarning as OutsideWorldWarning
    from .pytest_plugin.per_rank.rank_fixtures import rank_fixture as rank_fixture
    from .ranks.world import World as World
    from .reports.rank_outcome import Collect as Collect
    from .reports.rank_outcome import RankOutcome as RankOutcome
    from .tpu.memory import HostMemoryError as HostMemoryError
    from .tpu.memory import ResourceExhaustedError as ResourceExhaustedError

#: The public names and the modules they live in, imported on first use: importing the package
#: (as pytest does for the plugin in every session of an environment that has xlasim) must not
#: import torch until something is emulated.
_EXPORTS = {
    "emulate": "activation",
    "max_devices": "activation",
    "world": "activation",
    "is_emulated": "base.emulated_slice",
    "RankContext": "base.rank_context",
    "current": "base.rank_context",
    "CollectiveMismatchError": "base.errors",
    "CollectiveTimeoutError": "base.errors",
    "DeadlockError": "base.errors",
    "DeviceCountError": "base.errors",
    "MachineLostError": "base.errors",
    "OutsideWorldError": "base.errors",
    "PodJoinError": "base.errors",
    "RankExitError": "base.errors",
    "RankFailedError": "base.errors",
    "RuntimeAlreadyStartedError": "base.errors",
    "ScheduleStalledError": "base.errors",
    "UnsupportedCollectiveError": "base.errors",
    "WorldAbortedError": "base.errors",
    "XlasimError": "base.errors",
    "Topology": "base.topology",
    "Collect": "reports.rank_outcome",
    "RankOutcome": "reports.rank_outcome",
    "SpmdRefusedError": "emulation.spmd",
    "OutsideWorldWarning": "emulation.world_of_one",
    "World": "ranks.world",
    "rank_fixture": "pytest_plugin.per_rank.rank_fixtures",
    "ResourceExhaustedError": "tpu.memory",
    "HostMemoryError": "tpu.memory",
}
#: Public modules by the name users know them by (`xlasim.spmd.as_host`).
_MODULES = {"spmd": "emulation.spmd"}

#: Derived from the one table above; the imports under TYPE_CHECKING must agree with it.
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        value = importlib.import_module(f"{__name__}.{_MODULES[name]}")
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    else:  # a submodule: `xlasim.activation` after a bare `import xlasim`
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_MODULES})
