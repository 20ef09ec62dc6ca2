"""The process's warm world: the one `xlasim.world()`, torch_xla's launchers and the plugin run on.

Started on first use for the slice this process emulates (`base/emulated_slice.py`), replaced
when the slice changes, and closed before the interpreter finalizes.
"""

from __future__ import annotations

import atexit

from ..base import emulated_slice, rank_context
from ..base.errors import XlasimError, launch_inside_rank
from .world import World

_world: World | None = None


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
