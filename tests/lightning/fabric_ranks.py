"""A plain Lightning Fabric script (no xlasim in it): what Lightning's TPU detection sees, in the
launching process and on every rank. Run it with `xlasim run [--devices N | --topology NAME]`;
it prints one JSON line.
"""

import json

import torch
from lightning.fabric import Fabric
from lightning.fabric.accelerators import XLAAccelerator
from lightning.fabric.plugins.environments import XLAEnvironment


def where_am_i(fabric: Fabric) -> list[list[int]]:
    environment = XLAEnvironment()
    mine = torch.tensor(
        [
            fabric.global_rank,
            environment.global_rank(),
            environment.local_rank(),
            environment.node_rank(),
            environment.world_size(),
        ],
        device=fabric.device,
    )
    # XLAStrategy.all_gather concatenates along dim 0 (docs/lightning.md): one row per rank.
    return fabric.all_gather(mine).view(environment.world_size(), -1).cpu().tolist()


if __name__ == "__main__":
    detected = {
        "is_available": XLAAccelerator.is_available(),
        "auto_device_count": XLAAccelerator.auto_device_count(),
        "detect": XLAEnvironment.detect(),
    }
    fabric = Fabric(accelerator="tpu", devices="auto")
    detected["ranks"] = fabric.launch(where_am_i)
    print(json.dumps(detected))
