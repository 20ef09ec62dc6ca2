"""The property suite: Hypothesis draws every example in the parent, `xla_world.run_on` runs it
on the ranks, and the parent compares with a reference (NumPy, or the same program run
straight). Nothing here touches xlasim internals, so the suite runs unchanged on a TPU VM with
`--xla-backend=native` (where only the whole slice can be used, see `world_sizes`)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# `fixtures` and `strategy` live at the repository root.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

#: Sub-world sizes drawn on emulated cores (those the session has): 1 and 3 catch code that
#: assumes a power of two or more than one replica.
EMULATED_WORLD_SIZES = (1, 2, 3, 4, 8)


@pytest.fixture(scope="session")
def emulated() -> bool:
    """Whether the session's cores are emulated (False on a TPU VM with the native backend)."""
    import xlasim

    return xlasim.is_emulated()


@pytest.fixture(scope="session")
def world_sizes(xla_world, emulated) -> tuple[int, ...]:
    """World sizes the properties are drawn over: sub-worlds on emulated cores; natively only
    the whole slice, since the native backend runs every core of the slice or none."""
    if not emulated:
        return (xla_world.size,)
    return tuple(
        sorted({n for n in EMULATED_WORLD_SIZES if n <= xla_world.size} | {xla_world.size})
    )
