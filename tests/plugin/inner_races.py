"""Inner tests for test_plugin_races.py: a planted race, its fixed twin, and a race that only
some orders of the ranks make fail."""

import os
import time

import pytest
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def _marker(tmp_path):
    return os.path.join(str(tmp_path), "ready.marker")


@pytest.mark.xla
def test_planted(xla_rank, tmp_path):
    if xr.global_ordinal() == 0:
        with open(_marker(tmp_path), "w") as out:
            out.write("ready\n")
    time.sleep(0.1)
    os.path.exists(_marker(tmp_path))


@pytest.mark.xla
def test_fixed(xla_rank, tmp_path):
    if xr.global_ordinal() == 0:
        with open(_marker(tmp_path), "w") as out:
            out.write("ready\n")
    xm.rendezvous("marker written")
    assert os.path.exists(_marker(tmp_path))


@pytest.mark.xla
def test_order_sensitive(xla_rank, tmp_path):
    xm.rendezvous("start")
    if xr.global_ordinal() == 0:
        with open(_marker(tmp_path), "w") as out:
            out.write("ready\n")
    else:
        time.sleep(0.1)  # other work first: without a schedule rank 0 wins
        with open(_marker(tmp_path)) as read:
            assert read.read() == "ready\n"
