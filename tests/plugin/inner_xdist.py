"""Inner tests for test_plugin_xdist.py: -n 2, ini xla_devices = 4, a conftest that starts XLA."""

import os

import pytest
import torch
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from hypothesis import settings

import xlasim


@pytest.mark.xla
@pytest.mark.parametrize("case", range(4))
def test_world_of_four(xla_rank, case):
    assert xr.world_size() == 4 and xlasim.is_emulated()
    total = xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device) * case)
    assert total.item() == 4 * case
    print("worker", os.environ["PYTEST_XDIST_WORKER"])


def test_profile_chosen_on_the_command_line():
    assert settings.get_current_profile_name() == "mine"
