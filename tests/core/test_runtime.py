"""Runtime queries answer as on a one-host slice, and launchers run on the warm world."""

import pytest
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp
import torch_xla.runtime as xr

import xlasim


def snapshot(rank):
    return {
        "rank": rank,
        "world_size": xr.world_size(),
        "global_ordinal": xr.global_ordinal(),
        "local_ordinal": xr.local_ordinal(),
        "local_device_count": xr.local_device_count(),
        "addressable_device_count": xr.addressable_device_count(),
        "process_index": xr.process_index(),
        "process_count": xr.process_count(),
        "master_local": xm.is_master_ordinal(local=True),
        "master_global": xm.is_master_ordinal(local=False),
        "devices": xm.get_xla_supported_devices(),
        "device_type": xr.device_type(),
        "device": str(torch_xla.device()),
        "context": xlasim.current().rank,
    }


@pytest.mark.parametrize("size", [1, 3, 8])
def test_queries_inside_ranks(world, size):
    for rank, seen in enumerate(world.run(snapshot, size=size)):
        assert (
            seen["world_size"]
            == seen["local_device_count"]
            == seen["addressable_device_count"]
            == size
        )
        assert seen["global_ordinal"] == seen["local_ordinal"] == seen["context"] == rank
        assert seen["process_index"] == 0 and seen["process_count"] == 1
        assert seen["master_local"] == seen["master_global"] == (rank == 0)
        assert seen["devices"] == [f"xla:{i}" for i in range(size)]
        assert seen["device"] == f"xla:{rank}"
        assert seen["device_type"] == "TPU"


def test_outside_a_rank_there_is_no_context(world):
    assert xlasim.current() is None
    assert xr.world_size() == 1  # torch_xla's own answer outside replication
    assert len(xm.get_xla_supported_devices()) == world.size


def record_launch(index, tag, directory):
    """What a rank tells its launcher through the filesystem (its only channel on a TPU VM)."""
    (directory / f"{tag}-{index}").write_text(str(xr.world_size()))


def test_spawn_and_launch_run_every_rank_with_args(world, tmp_path):
    xmp.spawn(record_launch, args=("spawn", tmp_path))
    torch_xla.launch(record_launch, args=("launch", tmp_path))
    xmp.spawn(record_launch, args=("single", tmp_path), nprocs=1)
    seen = {path.name: path.read_text() for path in tmp_path.iterdir()}
    assert seen == {
        **{f"spawn-{i}": "8" for i in range(8)},
        **{f"launch-{i}": "8" for i in range(8)},
        "single-0": "1",
    }


def test_world_is_warm_threads_are_reused(world):
    first = world.run(lambda r: __import__("threading").get_ident())
    second = world.run(lambda r: __import__("threading").get_ident())
    assert first == second
    assert len(set(first)) == 8
