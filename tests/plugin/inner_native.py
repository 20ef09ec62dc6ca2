"""Inner tests for test_plugin_native.py: the real torch_xla through xmp.spawn, one CPU device."""

import os
import time

import pytest
import torch
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from hypothesis import settings


@pytest.fixture
def parent_pid():
    return os.getpid()  # resolved in the pytest process, handed to the ranks


@pytest.fixture
def numbers():
    return [1.0, 2.0, 3.0]


@pytest.mark.xla
def test_in_a_worker_process(xla_rank, numbers, parent_pid):
    assert os.getpid() != parent_pid  # the body ran in a spawned worker
    assert (xla_rank.rank, xla_rank.world_size, xr.world_size()) == (0, 1, 1)
    total = xm.all_reduce(xm.REDUCE_SUM, torch.tensor(numbers, device=xla_rank.device))
    assert total.cpu().tolist() == numbers
    print("worker", os.getpid())


@pytest.mark.xla(devices=[1, 2])
def test_sizes(xla_rank):
    assert xla_rank.world_size == 1


@pytest.mark.xla
def test_assert_fails(xla_rank):
    value = 3
    assert value == 4


@pytest.mark.xla
def test_every_rank_skips(xla_rank):
    pytest.skip("not on this chip")  # pytest's outcome classes do not pickle: sent as data


@pytest.mark.xla
@pytest.mark.xla_timeout(3)
def test_hangs(xla_rank):
    time.sleep(120)


def ordinal_plus(x):
    return (os.getpid(), x + xr.global_ordinal())


def test_after_the_hang(xla_world):
    [(pid, value)] = xla_world.run(ordinal_plus, 41)
    assert (value, xla_world.size) == (41, 1) and pid != os.getpid()
    assert settings.get_current_profile_name() == "xla-tpu"
