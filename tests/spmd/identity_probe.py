"""What an SPMD program over an emulated preset sees, printed as one JSON line `RESULT {...}`.

    xlasim run --topology NAME tests/spmd/identity_probe.py      # a script: xr.use_spmd()
    python tests/spmd/identity_probe.py --start-world NAME      # xlasim.spmd.start_world, as
                                                                # the plugin's SPMD worker
`test_spmd_entry_points.py` checks that both entry points answer alike on every preset.
"""

from __future__ import annotations

import json
import os
import sys

import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch_xla._internal import tpu

from xlasim import spmd

RUNTIME_QUERIES = (
    "global_runtime_device_count",
    "world_size",
    "global_ordinal",
    "local_ordinal",
    "local_device_count",
    "addressable_device_count",
    "global_device_count",
    "process_index",
    "process_count",
    "host_index",
    "device_type",
    "is_spmd",
)


def start() -> None:
    if sys.argv[1:2] == ["--start-world"]:
        from xlasim.base.topology import preset

        pod = preset(sys.argv[2])
        spmd.start_world(pod, pod.devices)
    else:
        xr.use_spmd()


def facts() -> dict:
    device = torch_xla.device()
    attributes = xr.global_runtime_device_attributes()
    slices = attributes[0].get("num_slices", 1)
    mesh = (
        xs.HybridMesh(ici_mesh_shape=(len(attributes) // slices, 1), dcn_mesh_shape=(slices, 1))
        if slices > 1
        else xs.get_1d_mesh("data")
    )
    return {
        **{name: getattr(xr, name)() for name in RUNTIME_QUERIES},
        "attributes": attributes,
        "mesh": mesh.device_ids.ravel().tolist(),
        "hardware": xm.xla_device_hw(device),
        "kind": xm.xla_device_kind(),
        "PJRT_DEVICE": os.environ["PJRT_DEVICE"],
        "tpu_env": tpu.get_tpu_env(),
        "chips": tpu.num_available_chips(),
        "workers": tpu.num_tpu_workers(),
        "hosts": list(spmd.hosts()),
        "host_process_index": [_as_host(h) for h in spmd.hosts()],
    }


def _as_host(host: int) -> list:
    with spmd.as_host(host):
        return [xr.process_index(), xr.process_count(), tpu.get_tpu_env()["WORKER_ID"]]


if __name__ == "__main__":
    start()
    print("RESULT", json.dumps(facts(), sort_keys=True))
