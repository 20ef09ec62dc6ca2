"""torch_xla's launchers on the emulated world: every rank of the warm world runs the function.

`xmp.spawn` and `torch_xla.launch` (which calls it) pass the index first; torch_xla's internal
`pjrt.spawn` takes its arguments in another order; `pjrt.run_multiprocess` (the launcher of
torch_xla's own tests) passes no index and returns `{ordinal: result}`; `pjrt.spawn_threads`
runs one thread per addressable device. All of them land on the same world, and each launch
starts its ranks as fresh processes would (see `World.run`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from .warm_world import world

R = TypeVar("R")


def spawn(
    fn: Callable[..., Any],
    args: tuple = (),
    nprocs: int | None = None,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> None:
    """torch_xla's contract: `nprocs` is None (every core) or 1; an exception in a rank reaches
    the caller (as `RankFailedError`, naming the rank, with the original as `__cause__`).

    Args:
        fn: called as `fn(index, *args)` on every rank, `index` its global ordinal.
        args: the arguments after the index.
        nprocs: None to run on every emulated core, 1 for one rank only; anything else is
            refused, as torch_xla refuses it.
        join: torch_xla's (it ignores it too): the call always returns when the ranks end.
        daemon: torch_xla's (it ignores it too): the ranks are the warm world's.
        start_method: torch_xla's multiprocessing start method; ignored, the world's ranks
            are already started.
    """
    if nprocs not in (None, 1):
        raise ValueError(
            f"Unsupported nprocs ({nprocs}). Please use nprocs=1 or None (default). If None, spawn "
            "will use all available devices. Choose how many cores are emulated with "
            "xlasim.emulate(devices=N), XLASIM_DEVICES, `xlasim run --devices N` or "
            "`pytest --xla-devices=N`."
        )
    world().run(fn, args, size=1 if nprocs == 1 else None)


def pjrt_spawn(
    fn: Callable[..., Any], nprocs: int | None = None, start_method: str = "spawn", args: tuple = ()
) -> None:
    """`torch_xla._internal.pjrt.spawn`, whose arguments come in another order.

    Args:
        fn: called as `fn(index, *args)` on every rank.
        nprocs: None for every emulated core, or 1 (as for `spawn`).
        start_method: ignored (as for `spawn`).
        args: the arguments after the index.
    """
    spawn(fn, args=args, nprocs=nprocs, start_method=start_method)


def run_multiprocess(
    fn: Callable[..., R], *args: Any, start_method: str = "spawn", **kwargs: Any
) -> dict[int, R]:
    """`pjrt.run_multiprocess`: `fn(*args, **kwargs)` on every rank, results by global ordinal.

    Args:
        fn: the function every rank runs; it is passed no index.
        args: its positional arguments.
        start_method: ignored (as for `spawn`).
        kwargs: its keyword arguments.
    """
    results = world().run(fn, args, kwargs, pass_rank=False)
    return dict(enumerate(results))


def spawn_threads(fn: Callable[..., Any], args: tuple = ()) -> None:
    """`pjrt.spawn_threads`: `fn(index, *args)` on every rank, as `xmp.spawn` does.

    Args:
        fn: called as `fn(index, *args)` on every rank.
        args: the arguments after the index.
    """
    spawn(fn, args=args)


def patches() -> list[tuple[Any, str, Any]]:
    """(owner, attribute, replacement) triples of torch_xla's launchers, for `patches.install`."""
    import torch_xla.distributed.xla_multiprocessing as xmp
    from torch_xla._internal import pjrt

    return [
        (xmp, "spawn", spawn),
        (pjrt, "spawn", pjrt_spawn),
        (pjrt, "run_multiprocess", run_multiprocess),
        (pjrt, "spawn_threads", spawn_threads),
    ]
