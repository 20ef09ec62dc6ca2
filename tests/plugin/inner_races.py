"""Inner tests for test_plugin_races.py: a planted race, its fixed twin, a race that only some
orders of the ranks make fail, and the same drawn by Hypothesis."""

import os
import tempfile
import time

import pytest
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from hypothesis import given, settings
from hypothesis import strategies as st


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


def _writes_then_others_read(directory, writes):
    """Rank 0 writes the marker after `writes` other files; the others read it, unordered."""
    if xr.global_ordinal() == 0:
        for index in range(writes):
            with open(os.path.join(directory, f"other{index}"), "w") as out:
                out.write("x")
        with open(os.path.join(directory, "ready.marker"), "w") as out:
            out.write("ready\n")
    else:
        time.sleep(0.1)  # other work first: without a schedule rank 0 wins
        with open(os.path.join(directory, "ready.marker")) as read:
            assert read.read() == "ready\n"


@settings(max_examples=3, deadline=None, database=None)
@given(writes=st.integers(0, 2))
def test_drawn_order_sensitive(xla_world, writes):
    with tempfile.TemporaryDirectory() as directory:
        xla_world.run(_writes_then_others_read, directory, writes)
