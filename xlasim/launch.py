"""`xmp.spawn` on the emulated world: every rank of the warm world runs `fn(index, *args)`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def spawn(
    fn: Callable[..., Any],
    args: tuple = (),
    nprocs: int | None = None,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> None:
    """torch_xla's contract: `nprocs` is None (every core) or 1; an exception in a rank reaches
    the caller (as `RankFailedError`, naming the rank, with the original as `__cause__`)."""
    from .activation import world

    if nprocs not in (None, 1):
        raise ValueError(
            f"Unsupported nprocs ({nprocs}). Please use nprocs=1 or None (default). If None, spawn "
            "will use all available devices. Use XLASIM_DEVICES / --xla-devices to choose how many "
            "cores are emulated."
        )
    world().run(fn, args, size=1 if nprocs == 1 else None)


def pjrt_spawn(
    fn: Callable[..., Any], nprocs: int | None = None, start_method: str = "spawn", args: tuple = ()
) -> None:
    """`torch_xla._internal.pjrt.spawn`, whose arguments come in another order."""
    spawn(fn, args=args, nprocs=nprocs, start_method=start_method)
