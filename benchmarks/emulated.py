"""Worker: time xm collectives on a world of N emulated cores (one process per N and mode).

`python benchmarks/emulated.py --devices N [--mode isolated|threads]` emulates N cores, then for
each (op, size) runs one `world.run` in which every rank, for each block, waits at
`xm.rendezvous`, then calls the patched `xm` collective on an XLA tensor `iterations` times, each
followed by `torch_xla.sync(wait=True)`, so the result is on the rank's device and nothing is
left pending when the clock stops. Inputs are device data (synced before timing): a pending graph
on the input would add its own execution to the first collective, which is not the collective's
cost.

The block barrier is `xm.rendezvous` in both modes: a `threading.Barrier` cannot reach ranks in
other processes, and one barrier for both modes keeps their block starts alike. Rank functions
live at module level: isolated ranks get them pickled by reference, as `xmp.spawn` does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from common import (
    Plan,
    buffer_elements,
    collective_record,
    emit,
    emulate,
    expected_ends,
    memcpy_seconds,
    moved_bytes,
    per_call_seconds,
    plan,
    worker_arguments,
)

import xlasim

Span = tuple[float, float]


def collective_call(op: str, devices: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The xm call a rank makes for `op`, as a training step would write it."""
    import torch_xla.core.xla_model as xm

    calls: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "all_reduce": lambda x: xm.all_reduce(xm.REDUCE_SUM, x),
        "all_gather": lambda x: xm.all_gather(x, dim=0),
        "reduce_scatter": lambda x: xm.reduce_scatter(
            xm.REDUCE_SUM, x, scale=1.0, scatter_dim=0, shard_count=devices
        ),
    }
    return calls[op]


def check_result(op: str, result: torch.Tensor, elements: int, devices: int) -> None:
    """Fail loudly if the timed call did not compute what it should (checked off the clock)."""
    ends = expected_ends(op, devices)
    host = result.cpu()
    got = (host[0].item(), host[-1].item())
    if host.numel() != elements or got != ends:
        raise AssertionError(f"{op}: {host.numel()} elements ending {got}, expected {ends}")


BLOCK_TAG = "xlasim-bench-block"


def rank_loop(rank: int, op: str, nbytes: int, the_plan: Plan) -> list[Span]:
    """One rank's part: warm up, check, then time each block from the rendezvous to the synced
    result."""
    import torch_xla
    import torch_xla.core.xla_model as xm

    here = xlasim.current()
    devices = here.world_size
    device = torch.device(here.device)
    in_elements, out_elements = buffer_elements(op, nbytes, devices)
    x = torch.full((in_elements,), float(rank + 1), device=device)
    torch_xla.sync(wait=True)
    call = collective_call(op, devices)
    for _ in range(the_plan.warmup):
        result = call(x)
        torch_xla.sync(wait=True)
    check_result(op, result, out_elements, devices)
    spans = []
    for _ in range(the_plan.repeats):
        xm.rendezvous(BLOCK_TAG)
        start = time.perf_counter()
        for _ in range(the_plan.iterations):
            call(x)
            torch_xla.sync(wait=True)
        spans.append((start, time.perf_counter()))
    return spans


def measure(world: xlasim.World, mode: str, op: str, nbytes: int, repeats: int) -> dict:
    """One case on the whole world: every rank's spans, turned into seconds per call, with
    the time a memcpy of the bytes it must move took just before it (in this, the launching
    process: in isolated mode it only serves the ranks' links while they run)."""
    the_plan = plan(nbytes, world.size, repeats)
    bound = memcpy_seconds(moved_bytes(op, nbytes, world.size))
    spans = world.run(rank_loop, args=(op, nbytes, the_plan))
    blocks = per_call_seconds(spans, the_plan.iterations)
    record = collective_record(op, nbytes, world.size, the_plan, blocks)
    record["mode"] = mode
    record["topology"] = world.topology.describe()
    record["memcpy_bound_s"] = bound
    return record


def main() -> None:
    args = worker_arguments(__doc__.splitlines()[0], modes=True)
    emulate(args.devices, args.mode)
    world = xlasim.world()
    for nbytes in args.sizes:
        for op in args.ops:
            emit(measure(world, args.mode, op, nbytes, args.repeats))


if __name__ == "__main__":
    main()
