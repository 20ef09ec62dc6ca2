"""Worker: time the same collectives with torch.distributed gloo across N processes on loopback.

This is what people use instead of an emulation, so it is the peer every xlasim figure is
divided by. `python benchmarks/gloo.py --devices N` hosts a TCPStore on an ephemeral port (the
kernel picks a free one, so parallel runs never clash), spawns N ranks with
torch.multiprocessing, and times each (op, size) exactly as the emulated worker does: same
buffers, same plan, from the first rank leaving a barrier to the last rank holding its result.
Rank 0 reports each case as soon as it is done.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from common import (
    Plan,
    buffer_elements,
    collective_record,
    emit,
    expected_ends,
    per_call_seconds,
    plan,
    worker_arguments,
)

LOOPBACK = "127.0.0.1"
STORE_TIMEOUT = timedelta(minutes=10)
Span = tuple[float, float]


def collective_call(op: str, x: torch.Tensor, out: torch.Tensor) -> None:
    """The gloo call for `op`. Outputs are preallocated, as gloo is meant to be used;
    all_reduce works in place on `out`."""
    if op == "all_reduce":
        dist.all_reduce(out)
    elif op == "all_gather":
        dist.all_gather_into_tensor(out, x)
    else:
        dist.reduce_scatter_tensor(out, x)


def check_call(op: str, x: torch.Tensor, out: torch.Tensor, devices: int) -> None:
    """One call from fresh inputs whose result is checked, off the clock.

    Afterwards an all_reduce buffer is zeroed: sums of zeros stay zero, so the timed in-place
    calls do the same work without their values overflowing from call to call.
    """
    if op == "all_reduce":
        out.copy_(x)
    collective_call(op, x, out)
    ends = expected_ends(op, devices)
    if (out[0].item(), out[-1].item()) != ends:
        raise AssertionError(
            f"gloo {op}: result ends {out[0].item()}, {out[-1].item()}; expected {ends}"
        )
    if op == "all_reduce":
        out.zero_()


def time_case(op: str, nbytes: int, devices: int, rank: int, the_plan: Plan) -> list[Span]:
    """Warm up, check the result, then time each block of calls from a barrier."""
    in_elements, out_elements = buffer_elements(op, nbytes, devices)
    x = torch.full((in_elements,), float(rank + 1))
    out = torch.zeros(out_elements)
    for _ in range(the_plan.warmup):
        collective_call(op, x, out)
    check_call(op, x, out, devices)
    spans = []
    for _ in range(the_plan.repeats):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(the_plan.iterations):
            collective_call(op, x, out)
        spans.append((start, time.perf_counter()))
    return spans


def all_spans(spans: list[Span], devices: int) -> list[list[Span]]:
    """Every rank's spans on every rank (off the clock), so rank 0 can report the block times."""
    mine = torch.tensor(spans, dtype=torch.float64)
    gathered = [torch.empty_like(mine) for _ in range(devices)]
    dist.all_gather(gathered, mine)
    return [[(float(s), float(e)) for s, e in rank_spans.tolist()] for rank_spans in gathered]


def rank_main(
    rank: int, devices: int, port: int, sizes: list[int], ops: list[str], repeats: int
) -> None:
    """One gloo process: join the group through the parent's store, run every case."""
    store = dist.TCPStore(LOOPBACK, port, devices, False, timeout=STORE_TIMEOUT)
    dist.init_process_group(
        "gloo", store=store, rank=rank, world_size=devices, timeout=STORE_TIMEOUT
    )
    for nbytes in sizes:
        for op in ops:
            the_plan = plan(nbytes, devices, repeats)
            spans = all_spans(time_case(op, nbytes, devices, rank, the_plan), devices)
            if rank == 0:
                blocks = per_call_seconds(spans, the_plan.iterations)
                emit(collective_record(op, nbytes, devices, the_plan, blocks))
    dist.destroy_process_group()


def main() -> None:
    args = worker_arguments(__doc__.splitlines()[0])
    os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # the ranks talk over loopback, inherited by children
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    store = dist.TCPStore(
        LOOPBACK, 0, args.devices + 1, True, timeout=STORE_TIMEOUT, wait_for_workers=False
    )
    mp.spawn(
        rank_main,
        args=(args.devices, store.port, args.sizes, args.ops, args.repeats),
        nprocs=args.devices,
    )


if __name__ == "__main__":
    main()
