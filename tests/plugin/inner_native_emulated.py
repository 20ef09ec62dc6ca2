"""Inner tests for test_plugin_native_emulated.py: the native executor (workers started by
`xmp.spawn`, jobs over its socket protocol, its outcomes and hang handling) serving a world of
2 ranks, whose `xmp.spawn` and collectives are xlasim's emulation (the inner conftest.py calls
`xlasim.emulate(devices=2, processes=2)`): each rank a worker process of its own."""

import os
import time

import pytest
import torch
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


@pytest.fixture
def parent_pid():
    return os.getpid()  # resolved in the pytest process, handed to the ranks


@pytest.mark.xla
def test_collective_across_workers(xla_rank, parent_pid):
    assert os.getpid() != parent_pid
    assert (xla_rank.world_size, xr.world_size(), xr.global_ordinal()) == (2, 2, xla_rank.rank)
    value = torch.tensor([float(xla_rank.rank + 1)], device=xla_rank.device)
    assert xm.all_reduce(xm.REDUCE_SUM, value).cpu().tolist() == [3.0]
    print("worker", os.getpid())


@pytest.mark.xla
def test_both_ranks_fail_alike(xla_rank):
    raise ValueError("on every rank")


@pytest.mark.xla
def test_rank_one_fails(xla_rank):
    if xla_rank.rank == 1:
        raise KeyError("rank one")


def ordinal_and_pid():
    return xr.global_ordinal(), os.getpid()


def test_world_run(xla_world):
    results = xla_world.run(ordinal_and_pid)
    assert [rank for rank, _ in results] == [0, 1]
    assert len({pid for _, pid in results}) == 2  # a worker process per rank


@pytest.mark.xla
def test_every_rank_skips(xla_rank):
    pytest.skip("not on this slice")


@pytest.mark.xla
@pytest.mark.xla_timeout(5)
def test_one_rank_hangs(xla_rank):
    if xla_rank.rank == 1:
        time.sleep(600)  # rank 0 waits for it in the collective
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device))


@pytest.mark.xla
def test_after_the_hang(xla_rank):
    assert xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device)).item() == 2.0


@pytest.mark.xla(devices=1)
def test_sub_world(xla_rank):
    pass
