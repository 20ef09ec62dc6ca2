"""A pod's race (docs/races.md, "Pods"): rank 0 writes a file in SHARED that the last rank, on
another host (on a pod, another machine), reads. `ordered`: a rendezvous of every rank between
the write and the read; `unordered`: none, the last rank polls for the file (a race).

    xlasim run --races ... races.py ordered|unordered SHARED
"""

import os
import sys
import time

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

#: How long the last rank polls for the file before giving up.
POLL_BOUND_S = 120.0


def main(index: int, mode: str, shared: str) -> None:
    path = os.path.join(shared, "written-by-rank-0")
    rank, last = xr.global_ordinal(), xr.world_size() - 1
    if rank == 0:
        with open(path, "w") as out:
            out.write("weights\n")
    if mode == "ordered":
        xm.rendezvous("written")
    elif rank == last:
        deadline = time.monotonic() + POLL_BOUND_S
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.1)
    if rank == last:
        with open(path) as read:
            print(f"rank {rank} read {read.read().strip()}")


if __name__ == "__main__":
    torch_xla.launch(main, args=tuple(sys.argv[1:3]))
