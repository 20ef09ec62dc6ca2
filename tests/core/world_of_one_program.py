"""torch_xla's collectives and helpers in a process that never launched: a world of 1 on its
first device, as on a TPU VM. Prints `RESULT {...}`: what they returned and the warnings seen.
`test_world_of_one.py` runs it natively (one CPU device) and under `xlasim run`; with
`--collectives-only` it leaves out the sharding collectives (reduce_scatter, ZeRO-1) and the
`xla` process group."""

from __future__ import annotations

import json
import os
import socket
import sys
import warnings

import torch
import torch.distributed as dist
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla.distributed.zero_redundancy_optimizer import ZeroRedundancyOptimizer


def collectives(device: torch.device) -> dict:
    t = torch.arange(4.0, device=device)
    return {
        "world_size": xr.world_size(),
        "ordinal": xr.global_ordinal(),
        "device": str(device),
        "all_reduce": xm.all_reduce(xm.REDUCE_SUM, t, scale=2.0).cpu().tolist(),
        "all_gather": xm.all_gather(t).cpu().tolist(),
        "rendezvous": [p.decode() for p in xm.rendezvous("r", b"mine")],
        "mesh_reduce": xm.mesh_reduce("m", 3, sum),
        "rng_state": xm.get_rng_state(),
    }


def shards(device: torch.device) -> list:
    t = torch.arange(4.0, device=device)
    return xm.reduce_scatter(xm.REDUCE_SUM, t, 1.0, 0, 1).cpu().tolist()


def zero1_step(device: torch.device) -> list:
    """One step of torch_xla's ZeRO-1 optimizer (its test_zero1.py runs this in the test
    process, a world of 1)."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4).to(device)
    optimizer = ZeroRedundancyOptimizer(model.parameters(), torch.optim.SGD, lr=0.5)
    model(torch.ones(2, 4, device=device)).sum().backward()
    optimizer.step()
    torch_xla.sync()
    return model.weight.cpu().tolist()


def process_group(device: torch.device) -> dict:
    """torch.distributed's `xla` group in a world of 1 (torch_xla's TPU-gated
    test_torch_distributed_xla_backend.py makes one in the test process)."""
    if "MASTER_PORT" not in os.environ:  # natively torch_xla's store listens on 12355: a free one
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(probe.getsockname()[1]))
    dist.init_process_group("xla", init_method="xla://")
    try:
        t = torch.arange(4.0, device=device)
        dist.all_reduce(t)
        dist.barrier()
        return {"rank": dist.get_rank(), "size": dist.get_world_size(), "sum": t.cpu().tolist()}
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        device = torch_xla.device()
        xm.set_rng_state(5)
        result = collectives(device)
        if "--collectives-only" not in sys.argv:
            # A world of 1 in a process of several devices: XLA rejects a one-shard
            # reduce-scatter over the process's devices, natively as emulated.
            result.update(reduce_scatter=shards(device), zero1=zero1_step(device))
            result.update(process_group=process_group(device))
    result["warnings"] = [
        str(w.message) for w in seen if w.category.__name__ == "OutsideWorldWarning"
    ]
    print("RESULT", json.dumps(result))
