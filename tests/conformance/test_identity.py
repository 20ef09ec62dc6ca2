"""The emulated slice is the TPU VM it stands for, to every query torch_xla code makes.

Expected values come from Cloud TPU's documentation of each slice (accelerator types, chips per
host, TensorCores per chip, HBM per core, host bounds), not from xlasim's code.
"""

import pytest
import torch
import torch_xla
import torch_xla.amp
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla._internal import tpu

from xlasim.base.generations import GiB
from xlasim.base.identity import Identity
from xlasim.base.topology import PRESETS, Topology


def hardware_answers(rank):
    device = torch_xla.device()
    with torch_xla.amp.autocast(device):
        product = torch.ones(2, 2, device=device) @ torch.ones(2, 2, device=device)
    return {
        "hw": xm.xla_device_hw(device),
        "real": xm.xla_real_devices([str(device)]),
        "kind": xm.xla_device_kind(device),
        "type": xr.device_type(),
        "version": tpu.version(),
        "tpu_type": tpu.get_tpu_type(),
        "workers": tpu.num_tpu_workers(),
        "worker": tpu.worker_id(),
        "chips": tpu.num_available_chips(),
        "local_processes": tpu.num_local_processes(),
        "expected_devices": tpu.num_expected_global_devices(),
        "host": xr.host_index(),
        "master": xr.get_master_ip(),
        "attributes": xr.runtime_device_attributes(str(device)),
        "memory": xm.get_memory_info(device),
        "autocast": product.dtype,
    }


def test_ranks_see_a_v5e_host_by_default(world):
    """8 emulated cores without a preset: a TPU v5e host (v5litepod-8), one chip per core."""
    for rank, seen in enumerate(world.run(hardware_answers)):
        assert seen["hw"] == seen["type"] == "TPU"
        assert seen["real"] == [f"TPU:{rank}"]
        assert seen["kind"] == "TPU v5 lite"
        assert (seen["version"], seen["tpu_type"]) == (5, "v5litepod")
        assert seen["workers"] == 1 and seen["worker"] == seen["host"] == 0
        assert seen["chips"] == seen["local_processes"] == seen["expected_devices"] == 8
        assert seen["master"] == "localhost"
        assert seen["attributes"] == {
            "coords": [rank % 2, rank // 2, 0],  # a 2x4 host, x fastest
            "core_on_chip": 0,
            "num_cores": 1,  # a v5e chip's one TensorCore; no name, which only the global list has
        }
        assert seen["memory"]["bytes_limit"] == 16 * GiB
        assert seen["autocast"] == torch.bfloat16  # torch_xla's TPU branch of autocast


def test_the_launching_process_sees_the_same_tpu(world):
    """Code before `xmp.spawn` (a TPU VM's main process) gets the same identity."""
    assert xm.xla_device_hw(torch_xla.device()) == "TPU"
    assert tpu.get_tpu_env()["ACCELERATOR_TYPE"] == "v5litepod-8"
    attributes = xr.global_runtime_device_attributes()
    assert [a["name"] for a in attributes] == [f"TPU:{i}" for i in range(8)]


def test_replication_still_matches_the_cpu_clients_devices(world):
    """`xm.set_replication` matches real device names against the CPU client's own list
    (through `xla_replication_devices`); the TPU names must not break it."""
    devices = [f"xla:{i}" for i in range(8)]
    assert xm.xla_replication_devices(devices) == [f"CPU:{i}" for i in range(8)]


@pytest.mark.parametrize(
    "name, accelerator, chips_per_host, host_bounds, kind, memory",
    [
        ("v2-8", "v2-8", "2,2,1", "1,1,1", "TPU v2", 8 * GiB),
        ("v3-8", "v3-8", "2,2,1", "1,1,1", "TPU v3", 16 * GiB),
        ("v4-8", "v4-8", "2,2,1", "1,1,1", "TPU v4", 32 * GiB),
        ("v4-16", "v4-16", "2,2,1", "1,1,2", "TPU v4", 32 * GiB),
        ("v5e-8", "v5litepod-8", "2,4,1", "1,1,1", "TPU v5 lite", 16 * GiB),
        ("v3-32", "v3-32", "2,2,1", "2,2,1", "TPU v3", 16 * GiB),
        ("v5p-8", "v5p-8", "2,2,1", "1,1,1", "TPU v5", 95 * GiB),
        ("v5p-16", "v5p-16", "2,2,1", "1,1,2", "TPU v5", 95 * GiB),
        ("v6e-8", "v6e-8", "2,4,1", "1,1,1", "TPU v6 lite", 32 * GiB),
    ],
)
def test_presets_describe_their_cloud_tpu_slice(
    name, accelerator, chips_per_host, host_bounds, kind, memory
):
    identity = Identity.of(PRESETS[name][0])
    env = identity.tpu_env(host=0)
    assert env["ACCELERATOR_TYPE"] == accelerator
    assert env["TPU_CHIPS_PER_PROCESS_BOUNDS"] == chips_per_host
    assert env["TPU_PROCESS_BOUNDS"] == host_bounds
    assert identity.generation.device_kind == kind
    assert identity.generation.memory_per_core == memory  # xm.get_memory_info's bytes_limit


def test_two_core_chips_number_their_cores_and_share_coordinates():
    """v3: two TensorCores per chip, devices 2c and 2c+1 on chip c."""
    identity = Identity.of(PRESETS["v3-8"][0])
    cores = [identity.device_attributes(i) for i in range(8)]
    assert [c["core_on_chip"] for c in cores] == [0, 1] * 4
    assert cores[0]["coords"] == cores[1]["coords"] == [0, 0, 0]
    assert cores[2]["coords"] == [1, 0, 0] and cores[6]["coords"] == [1, 1, 0]


def test_hosts_of_a_pod_tile_the_slice():
    """v4-16: two hosts stacked along z; each host's 2x2 chips have their own z plane, and every
    chip has distinct coordinates."""
    identity = Identity.of(PRESETS["v4-16"][0])
    coords = [tuple(identity.device_attributes(i)["coords"]) for i in range(8)]
    assert len(set(coords)) == 8
    assert {c[2] for c in coords[:4]} == {0} and {c[2] for c in coords[4:]} == {1}
    assert identity.tpu_env(host=1)["WORKER_ID"] == "1"
    assert identity.worker_hostnames() == ["127.0.0.1", "127.0.0.2"]


def test_an_unknown_generation_is_refused():
    with pytest.raises(ValueError, match="unknown TPU generation 'v9'"):
        Topology(8, generation="v9")


def test_asking_for_the_tpu_it_is_changes_nothing_and_another_type_is_refused(world):
    """`xr.set_device_type('TPU')` after the runtime started is a no-op on a TPU VM (its
    environment says TPU); torch_xla's own TPU tests call it in setUp. Another type is still
    refused once the runtime runs, with torch_xla's error."""
    torch_xla.device()
    xr.set_device_type("TPU")
    assert xr.device_type() == "TPU"
    assert (
        world.run(
            lambda rank: float(
                xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=torch_xla.device())).item()
            )
        )[0]
        == 8.0
    )
    with pytest.raises(RuntimeError, match="Can't change device type after XLA runtime"):
        xr.set_device_type("CUDA")
