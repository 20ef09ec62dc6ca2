"""The process's warm world: the one `xlasim.world()`, torch_xla's launchers and the plugin run on.

Started on first use for the slice this process emulates (`base/emulated_slice.py`), replaced
when the slice changes, and closed before the interpreter finalizes.

A process forked from this one (a `ProcessPoolExecutor` with the fork start method, as
torch_xla's own tests use) inherits the world's bookkeeping but none of its rank threads, and
shares its worker processes' pipes with the parent: launching on it would wait for ranks that do
not exist. So the child forgets the world. It starts a world of its own when the parent's ranks
were threads and the parent's XLA runtime had not started; otherwise its launch fails at once
naming the fork (`base/forks.py`).
"""

from __future__ import annotations

import atexit
import os

from ..base import emulated_slice, forks, rank_context
from ..base.errors import XlasimError, launch_inside_rank
from .world import World

_world: World | None = None
#: In a forked child: the parent's world had worker processes (they answer only the parent).
_forked_from_process_ranks = False


def _after_fork_in_child() -> None:
    global _world, _forked_from_process_ranks
    _forked_from_process_ranks = _world is not None and not _world.ranks_are_threads
    _world = None  # its threads stayed in the parent; its workers answer the parent


os.register_at_fork(after_in_child=_after_fork_in_child)


def world() -> World:
    """The warm world of emulated ranks, started on first use (and closed at exit)."""
    global _world
    rank = rank_context.current()
    if rank is not None:  # before the worker check: a worker's rank is not its import
        raise launch_inside_rank(rank.rank)
    if emulated_slice.in_worker():
        raise XlasimError(
            "a launch from a worker process outside any rank: the launching script was imported "
            "there to find the function to run, and it launches when imported. Put the launch "
            'under `if __name__ == "__main__":` (xmp.spawn on a TPU VM needs that too).'
        )
    if _world is None or _world.topology != emulated_slice.topology():
        forks.refuse_after_fork(
            "a launch",
            "its emulated ranks were worker processes that answer only to it"
            if _forked_from_process_ranks
            else None,
        )
        if _world is None:
            atexit.register(close)
        _world = World(emulated_slice.topology())
    return _world


def started() -> World | None:
    """The warm world if one was started (a script that never launched has none)."""
    return _world


def close() -> list[int]:
    """Stop the world's ranks before the interpreter finalizes: a rank thread still inside
    XLA's native code at that point would abort the process. Returns the ranks that could not
    be stopped."""
    global _world
    if _world is None:
        return []
    stuck, _world = _world.close(), None
    return stuck
