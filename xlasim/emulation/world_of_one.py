"""Collectives called outside any rank: torch_xla's own world-of-1 paths, as on a TPU VM.

On a TPU VM a process that never spawned is a world of 1 on its first device: `xr.world_size()`
is 1 and torch_xla's collectives take their world-of-1 paths (`all_reduce` returns a clone,
`rendezvous` exchanges its own payload through a one-replica all_gather). torch_xla's own
TPU-gated tests rely on that (`test/test_zero1.py` runs `ZeroRedundancyOptimizer` in the test
process). Outside a rank the emulation therefore hands the call to torch_xla's original
function, on this process's first device. When the emulated slice has more than one core such a
call is more likely a mistake (a test that asked for 8 cores whose body never reached a rank),
so it warns, naming the line; it is not an error, since a TPU VM would run it.
"""

from __future__ import annotations

import functools
import threading
import warnings
from collections.abc import Callable
from typing import Any

from ..base import rank_context
from ..base.public import public
from ..reports.callsite import call_location

_local = threading.local()


@public
class OutsideWorldWarning(UserWarning):
    """A collective ran outside any rank of a slice of several cores, as a world of 1."""


def warn_outside(api: str, cores: int) -> None:
    """Warn that `api` ran outside any rank of a slice of `cores` cores (none for one core).

    Args:
        api: what the user called (`xm.all_reduce`).
        cores: the emulated slice's cores.
    """
    if cores <= 1:
        return
    warnings.warn(
        OutsideWorldWarning(
            f"{api} at {call_location()} ran outside any rank of the emulated {cores}-core "
            "slice, so it took torch_xla's world-of-1 path, as a TPU VM process that never "
            "spawned does. To run it on every core, launch it (xmp.spawn(fn), "
            "torch_xla.launch(fn)), mark the test @pytest.mark.xla or use the xla_world fixture."
        ),
        stacklevel=3,
    )


def or_world_of_one(
    emulated: Callable[..., Any], original: Callable[..., Any], api: str, cores: int
) -> Callable[..., Any]:
    """`emulated` on a rank; elsewhere torch_xla's `original` (a world of 1), with a warning
    on a slice of several cores (once per outermost call: torch_xla's `rendezvous` calls
    `xla_rendezvous`, which calls `all_gather`).

    Args:
        emulated: the emulated collective, run when the caller is a rank.
        original: torch_xla's function of the same name.
        api: the name users call, for the warning (`xm.all_reduce`).
        cores: the emulated slice's cores (a warning only when there are several).
    """

    @functools.wraps(original)
    def collective(*args: Any, **kwargs: Any) -> Any:
        import torch

        if rank_context.current() is not None or torch.compiler.is_compiling():
            return emulated(*args, **kwargs)
        outermost = not getattr(_local, "inside", False)
        if outermost:
            warn_outside(api, cores)
        _local.inside = True
        try:
            return original(*args, **kwargs)
        finally:
            _local.inside = not outermost

    collective.on_rank = emulated  # type: ignore[attr-defined]
    return collective
