"""A warning when a rank seeds a CPU generator that other ranks share.

On TPU v4+ every rank is a process with its own CPU generators, and training code relies on it:
each rank calls `torch.manual_seed(s)` and draws the same initial weights or the same batch.
Where ranks share a process (the threads mode, `processes=1`, or a v2/v3 host with 2 cores per
process), one rank's seed reseeds its neighbours' generator too, and the draws interleave in
whatever order the threads run: results differ from the TPU's, and from run to run. Seeding
inside such a rank gets a warning that names the line and the two fixes.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

from ..base import rank_context
from ..reports.callsite import call_location


class SharedGeneratorWarning(UserWarning):
    """A rank seeded a CPU random generator that other ranks of its process also draw from."""


def _shared_process_ranks() -> int:
    ctx = rank_context.current()
    if ctx is None:
        return 0
    return ctx.addressable_device_count


def warn_when_shared(seed: Callable[..., Any], name: str) -> Callable[..., Any]:
    """`seed` (e.g. `torch.manual_seed`), warning when called in a rank that shares its process.

    Args:
        seed: the seeding function wrapped.
        name: how the warning names it (`torch.manual_seed`).
    """

    @functools.wraps(seed)
    def seeding(*args: Any, **kwargs: Any) -> Any:
        neighbours = _shared_process_ranks()
        if neighbours > 1:
            warnings.warn(
                SharedGeneratorWarning(
                    f"{name} at {call_location()} reseeds the CPU generator that all "
                    f"{neighbours} ranks of this process share (ranks are threads here; on a "
                    "TPU v4+ each has its own process), so the ranks' draws depend on thread "
                    "timing. Draw from a generator of the rank's own (torch.Generator()."
                    "manual_seed(s), random.Random(s), numpy.random.default_rng(s)), or run "
                    "isolated ranks: one process per core, the default (not processes=1)."
                ),
                stacklevel=2,
            )
        return seed(*args, **kwargs)

    return seeding


def patches() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) triples for the three CPU generators' seeding calls."""
    import random

    import numpy as np
    import torch

    return [
        (torch, "manual_seed", warn_when_shared(torch.manual_seed, "torch.manual_seed")),
        (
            torch.random,
            "manual_seed",
            warn_when_shared(torch.random.manual_seed, "torch.manual_seed"),
        ),
        (random, "seed", warn_when_shared(random.seed, "random.seed")),
        (np.random, "seed", warn_when_shared(np.random.seed, "numpy.random.seed")),
    ]
