"""Running a function on every XLA core with `xmp.spawn`, and bringing global rank 0's result back.

Each rank gets its own copy of everything. The strategy, function and arguments are pickled
once in the caller and unpickled by every rank. On a TPU VM, `xmp.spawn` pickles them into
processes anyway; but in emulation (ranks are threads of one process), and on TPU v2/v3 hosts
(two cores per process, as threads), ranks would otherwise share one Python object, and one
rank moving "the" model to its device would move it for all. Pickling up front also reports
an unpicklable argument at once, on any machine, instead of first on the TPU.

The result goes through a file. `xmp.spawn` returns nothing, and ranks may be separate
processes, so no in-memory object can carry it. Global rank 0 alone writes its return value
with `torch.save` (XLA tensors become CPU tensors) into a directory made for this launch only,
through a temporary file and a rename; the caller reads it after `xmp.spawn` has returned and
removes the directory. With one writer and one directory per launch there is nothing to race
(a launcher once had every rank write the same temporary results file). A
`multiprocessing.Manager` queue, Lightning's way, was not used: it forks a server process from a
process whose threads are running the XLA runtime, and its reader blocks until something
arrives, which hangs on hosts where no rank sends anything (Lightning #16843).

On a multi-host slice every host runs the script and its own `xmp.spawn`; only the host that
runs global rank 0 finds a result, and the others get None without waiting for anything.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch_xla
import torch_xla.distributed.xla_multiprocessing as xmp

from .devices import DeviceSelectionError, available_devices
from .serialization import save_atomic

if TYPE_CHECKING:
    from .strategy import XLAStrategy

RESULT_FILE = "global-rank-0.pt"


def _pickle_job(
    strategy: XLAStrategy, function: Callable[..., Any], args: tuple, kwargs: dict
) -> bytes:
    try:
        return pickle.dumps((strategy, function, args, kwargs))
    except Exception as error:
        raise TypeError(
            f"cannot launch {getattr(function, '__qualname__', function)!r}: every rank gets its "
            f"own copy of the function and its arguments by pickling, and pickling failed "
            f"({type(error).__name__}: {error}). Define the function at module level and pass "
            "picklable arguments (no lambdas, local functions, open files or XLA tensors)."
        ) from error


def _run_job(job: bytes) -> tuple[XLAStrategy, Any]:
    strategy, function, args, kwargs = pickle.loads(job)
    strategy.setup_environment()
    return strategy, function(*args, **kwargs)


def _spawned(index: int, job: bytes, result_dir: str) -> None:
    """The body of every spawned rank (module level, so that xmp.spawn can pickle it)."""
    strategy, result = _run_job(job)
    # Every rank finishes its pending graph: rank 0 copying its result to the host must not
    # execute, alone, a graph that holds a collective.
    torch_xla.sync()
    if strategy.is_global_zero:
        save_atomic(result, Path(result_dir) / RESULT_FILE)


class XLALauncher:
    """Launches a function on every core of the host through `xmp.spawn`."""

    def __init__(self, strategy: XLAStrategy):
        self.strategy = strategy

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `function(*args, **kwargs)` on every rank; return global rank 0's result (None on
        the other hosts of a multi-host slice)."""
        wanted = len(self.strategy.parallel_devices)
        available = available_devices()
        if wanted != available:
            raise DeviceSelectionError(
                f"xmp.spawn runs one replica on every core of the host: {wanted} devices were "
                f"selected but this host has {available}"
            )
        job = _pickle_job(self.strategy, function, args, kwargs)
        with tempfile.TemporaryDirectory(prefix="xla-launch-") as result_dir:
            xmp.spawn(_spawned, args=(job, result_dir), start_method="spawn")
            result_path = os.path.join(result_dir, RESULT_FILE)
            if not os.path.exists(result_path):
                return None  # global rank 0 ran on another host
            return torch.load(result_path, map_location="cpu", weights_only=False)


class InProcessLauncher:
    """Runs a function in the calling process on one device, with the same copy semantics as
    `XLALauncher` (the caller's objects are never modified)."""

    def __init__(self, strategy: XLAStrategy):
        self.strategy = strategy

    def launch(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run `function(*args, **kwargs)` here and return its result."""
        _, result = _run_job(_pickle_job(self.strategy, function, args, kwargs))
        return result
