"""A program of torch_xla collectives for pod tests: every rank prints a digest of each result
(`rank R: NAME DIGEST`), so a pod's output can be compared with one machine's bit for bit.

    collectives.py          two launches of every collective, then exit
    collectives.py forever  all_reduce in a loop, printing `step N` (to kill a machine mid-way)
    collectives.py raises   rank 3 raises instead of calling an all_reduce
    collectives.py mismatch ranks 2-3 all_reduce 3 elements, ranks 0-1 4
"""

import hashlib
import os
import sys

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the `xla` backend)
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr


def digest(tensor: torch.Tensor) -> str:
    raw = tensor.cpu().contiguous().view(torch.uint8).numpy().tobytes()
    return hashlib.sha256(raw).hexdigest()[:16]


def say(line: str) -> None:
    """One line in one write: the ranks of a machine share its stdout."""
    os.write(1, f"{line}\n".encode())


def program(index: int, launch: int) -> None:
    device = xm.xla_device()
    rank, size = xr.global_ordinal(), xr.world_size()
    generator = torch.Generator().manual_seed(1000 * launch + rank)
    x = torch.randn(1024, generator=generator).to(device)
    # Random floats of every rank: the sum's bits depend on the order ranks are combined in.
    results = {
        "all_reduce": xm.all_reduce(xm.REDUCE_SUM, x),
        "all_reduce_bf16": xm.all_reduce(xm.REDUCE_SUM, x.to(torch.bfloat16), scale=0.5),
        "all_reduce_max_int": xm.all_reduce(xm.REDUCE_MAX, (x * 100).to(torch.int32)),
        "all_reduce_groups_across": xm.all_reduce(
            xm.REDUCE_SUM, x, groups=[list(range(0, size, 2)), list(range(1, size, 2))]
        ),
        "all_reduce_groups_within": xm.all_reduce(
            xm.REDUCE_SUM, x, groups=[list(range(size // 2)), list(range(size // 2, size))]
        ),
        "all_gather": xm.all_gather(x[:8]),
        "reduce_scatter": xm.reduce_scatter(xm.REDUCE_SUM, x[: 4 * size], 1.0, 0, size),
        "all_to_all": xm.all_to_all(x[: 2 * size], 0, 0, size),
        "collective_permute": xm.collective_permute(
            x[:5], [[i, (i + 1) % size] for i in range(size)]
        ),
    }
    # A ring of xm.send/recv, each rank on a channel of its own: ranks 1 -> 2 and 3 -> 0 cross
    # machines on a pod of 2.
    xm.send(x[:6] * (rank + 1), channel_id=100 + rank)
    received = torch.zeros(6, device=device)
    results["send_recv_ring"] = xm.recv(received, channel_id=100 + (rank - 1) % size)
    # torch_xla's own send/recv pipeline (test_collective_ops_tpu): ranks 0-1 send to 2-3 through
    # the `xla` process group, each pair across machines on a pod of 2.
    dist.init_process_group("xla", init_method="xla://")
    piped = x[:3].clone()
    if rank < size // 2:
        dist.send(piped, rank + size // 2)
    else:
        dist.recv(piped, rank - size // 2)
    results["dist_send_recv_pipeline"] = piped
    for name, value in results.items():
        say(f"rank {rank}: {name} {digest(value)}")
    say(f"rank {rank}: rendezvous {xm.rendezvous('tag', f'r{rank}'.encode())}")
    say(f"rank {rank}: mesh_reduce {xm.mesh_reduce('m', rank * 1.5, sum)}")
    say(
        f"rank {rank}: identity process {xr.process_index()} of {xr.process_count()}, "
        f"local {xr.local_ordinal()}, host {xr.host_index()}"
    )


def forever(index: int) -> None:
    device = xm.xla_device()
    for step in range(10**6):
        xm.all_reduce(xm.REDUCE_SUM, torch.ones(4, device=device)).cpu()
        if xr.global_ordinal() == 0:
            say(f"step {step}")


def raises(index: int) -> None:
    device = xm.xla_device()
    if xr.global_ordinal() == 3:
        raise ValueError("planted failure on rank 3")
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(4, device=device)).cpu()


def mismatch(index: int) -> None:
    device = xm.xla_device()
    elements = 3 if xr.global_ordinal() >= 2 else 4
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(elements, device=device)).cpu()


if __name__ == "__main__":
    modes = {"forever": forever, "raises": raises, "mismatch": mismatch}
    if sys.argv[1:2] and sys.argv[1] in modes:
        xmp.spawn(modes[sys.argv[1]])
    else:
        for launch in range(2):
            xmp.spawn(program, args=(launch,))
