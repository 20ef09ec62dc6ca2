"""The zygote: the process isolated ranks' worker processes are forked from.

It is multiprocessing's forkserver with a preload: a fresh interpreter that imports torch,
torch_xla and the worker's side of xlasim once and never starts an XLA runtime, so each worker
forked from it starts in a fraction of a second instead of paying the import (~4 s of CPU here).

Its import is the longest step of starting an isolated world, so `emulate` starts it before the
launching process imports torch_xla (or even torch), and both imports run side by side; this
module therefore imports neither. Workers inherit the zygote's environment (the launching
process's when `emulate` started it), so a worker sets its device count and each job's
environment itself (`worker.py`).
"""

from __future__ import annotations

import tempfile
import threading
from multiprocessing import context as mp_context
from multiprocessing import forkserver, get_context

from ..base.errors import XlasimError
from .rank_coverage import requested, unmeasured_start

#: Imported once by the zygote, inherited by every worker it forks: everything a worker imports
#: before its first job (`worker.py` imports its modules at module level; the launchers'
#: patches, which the parent hands it by name, with the world they launch on).
PRELOAD = [
    "torch",
    "torch_xla",
    "torch_xla.core.xla_model",
    "numpy",
    "xlasim.ranks.worker",
    "xlasim.ranks.launchers",
]

_lock = threading.Lock()


def zygote() -> mp_context.ForkServerContext:
    """The forkserver context workers are forked from, started (once) without waiting for its
    imports: the first worker's start waits for them."""
    context = get_context("forkserver")
    # coverage.py, when it measures this process (`--cov`, `coverage run`): each worker would
    # import it (~60 ms of CPU); imported in the zygote it is inherited, and importing it starts
    # no measurement (rank_coverage.py starts that in the worker, at its first job).
    measured = ["coverage"] if requested() is not None else []
    with _lock:
        context.set_forkserver_preload(PRELOAD + measured)
        try:
            with unmeasured_start():  # workers measure themselves (rank_coverage.py)
                forkserver.ensure_running()
        except OSError as error:
            if "too long" not in str(error):
                raise
            raise XlasimError(
                f"the temporary directory {tempfile.gettempdir()!r} is too long a path for the "
                "Unix socket multiprocessing's forkserver (the zygote of worker processes) puts "
                f"there ({error}): set TMPDIR to a shorter directory, or run the threads mode "
                "(processes=1)"
            ) from error
    return context
