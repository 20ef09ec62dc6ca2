"""Worker of the pod benchmark (pods.py): all_reduce of 4 KB and 16 MB timed on one machine of a
pod, or with plain torch.distributed gloo between the same namespaces.

    pod_worker.py xlasim REPEATS          (under `xlasim run --machines ...`: every rank calls
                                           xm.all_reduce, each call synced; rank 0 prints)
    pod_worker.py gloo RANK HOST:PORT REPEATS   (one gloo process per machine, the peer)
    pod_worker.py memory MIB              (under `xlasim run`: every rank holds MIB of device
                                           tensors, as a model's state would, through a
                                           collective and a pause for the memory samples)

Each prints one JSON line per size on rank 0: the median seconds of `REPEATS` calls after two
warm-up calls; results are checked off the clock (every rank contributes rank + 1).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta

import torch

SIZES = (4096, 16 << 20)


def _median(call: Callable[[], torch.Tensor], repeats: int) -> tuple[float, torch.Tensor]:
    result = call()
    result = call()
    seconds = []
    for _ in range(repeats):
        began = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - began)
    return statistics.median(seconds), result


def _report(peer: str, nbytes: int, seconds: float, result: torch.Tensor, size: int) -> None:
    expected = float(sum(range(1, size + 1)))
    if (result[0].item(), result[-1].item()) != (expected, expected):
        raise AssertionError(f"{peer} all_reduce: {result[0].item()} != {expected}")
    print(json.dumps({"peer": peer, "bytes": nbytes, "seconds": seconds}), flush=True)


def xlasim_rank(index: int, repeats: int) -> None:
    import torch_xla
    import torch_xla.core.xla_model as xm
    import torch_xla.runtime as xr

    device = xm.xla_device()
    rank, size = xr.global_ordinal(), xr.world_size()
    for nbytes in SIZES:
        x = torch.full((nbytes // 4,), float(rank + 1), device=device)
        torch_xla.sync(wait=True)

        def call(x: torch.Tensor = x) -> torch.Tensor:
            result = xm.all_reduce(xm.REDUCE_SUM, x)
            torch_xla.sync(wait=True)
            return result

        seconds, result = _median(call, repeats)
        if rank == 0:
            _report("xlasim", nbytes, seconds, result.cpu(), size)


def gloo(rank: int, endpoint: str, repeats: int) -> None:
    import torch.distributed as dist

    host, port = endpoint.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), 2, rank == 0, timeout=timedelta(seconds=120))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2)
    for nbytes in SIZES:
        x = torch.full((nbytes // 4,), float(rank + 1))

        def call(x: torch.Tensor = x) -> torch.Tensor:
            out = x.clone()
            dist.all_reduce(out)
            return out

        seconds, result = _median(call, repeats)
        if rank == 0:
            _report("gloo", nbytes, seconds, result, 2)
    dist.destroy_process_group()


def memory_rank(index: int, mebibytes: int) -> None:
    import torch_xla
    import torch_xla.core.xla_model as xm

    device = xm.xla_device()
    state = torch.ones(mebibytes << 18, device=device)
    torch_xla.sync(wait=True)
    total = xm.all_reduce(xm.REDUCE_SUM, state[:4])
    torch_xla.sync(wait=True)
    time.sleep(3)  # every rank holds its state: the samples' peak
    xm.rendezvous("held")
    assert total.cpu()[0].item() >= 1.0


if __name__ == "__main__":
    if sys.argv[1] in ("xlasim", "memory"):
        import torch_xla.distributed.xla_multiprocessing as xmp

        rank_function = xlasim_rank if sys.argv[1] == "xlasim" else memory_rank
        xmp.spawn(rank_function, args=(int(sys.argv[2]),))
    else:
        gloo(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
