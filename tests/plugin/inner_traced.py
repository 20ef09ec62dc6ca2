"""Inner tests for test_plugin_trace.py: one program, traced emulated and natively (one device)."""

import threading

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm


@pytest.mark.xla
def test_program(xla_rank, tmp_path_factory):
    device = torch_xla.device()
    value = torch.arange(4, dtype=torch.float32, device=device)
    value = xm.all_reduce(xm.REDUCE_SUM, value)
    xm.all_reduce(xm.REDUCE_MAX, [value], groups=[[0]])
    xm.all_gather(value, dim=0)
    xm.reduce_scatter(xm.REDUCE_SUM, value, 1.0, 0, 1)
    torch_xla.sync()
    xm.mesh_reduce("loss", 1.0, sum)
    xm.rendezvous("end")


@pytest.mark.xla
def test_fails(xla_rank):
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=torch_xla.device()))
    assert xla_rank.rank == 99


@pytest.mark.xla(timeout=4)
def test_hangs(xla_rank):
    """Recorded, then stuck for good: natively the worker is killed after its events are
    written out; emulated the rank thread is abandoned and its events read in memory."""
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=torch_xla.device()))
    threading.Event().wait()
