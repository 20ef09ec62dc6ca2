"""SPMD tests and per-rank (replica) tests interleaved in one file: SPMD never leaks out."""

import os
import signal
import time

import numpy as np
import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import xlasim


def spmd_off() -> None:
    assert not xr.is_spmd() and "XLA_USE_SPMD" not in os.environ


def sharded_matmul(mesh: xs.Mesh) -> None:
    """Rows sharded over the mesh's first axis: the product equals the unsharded one."""
    a, b = torch.arange(64.0).reshape(8, 8), torch.arange(32.0).reshape(8, 4)
    xa = a.to(torch_xla.device())
    xs.mark_sharding(xa, mesh, (mesh.axis_names[0], None))
    assert torch_xla._XLAC._get_xla_sharding_spec(xa) != ""
    assert torch.equal((xa @ b.to(torch_xla.device())).cpu(), a @ b)


@pytest.mark.xla
def test_replica_first(xla_rank):
    spmd_off()
    total = xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device))
    assert total.item() == xla_rank.world_size


@pytest.mark.xla(spmd=True, min_devices=8)
def test_spmd_slice(xla_mesh):
    assert xr.is_spmd() and xr.global_runtime_device_count() == 8
    assert xr.device_type() == "TPU" and os.environ["PJRT_DEVICE"] == "TPU"
    assert xla_mesh.mesh_shape == (8,) and xla_mesh.axis_names == ("data",)
    sharded_matmul(xla_mesh)
    sharded_matmul(xs.Mesh(np.arange(8), (2, 4), ("x", "y")))


@pytest.mark.xla
def test_replica_between(xla_rank):
    spmd_off()
    assert xr.world_size() == xla_rank.world_size


@pytest.mark.xla(spmd=True)
def test_spmd_any_size():
    n = xr.global_runtime_device_count()
    assert xr.is_spmd() and 8 % n == 0
    sharded_matmul(xs.Mesh(np.arange(n), (n,), ("data",)))
    torch_xla.sync()  # a graph execution, in the trace under --xla-trace


@settings(max_examples=3, deadline=None)
@given(st.integers(1, 3))
@pytest.mark.xla(spmd=True)
def test_spmd_given(xla_mesh, scale):  # Hypothesis draws in the worker: the body runs once
    n = xr.global_runtime_device_count()
    a = torch.arange(8.0 * n).reshape(n, 8) * scale
    xa = a.to(torch_xla.device())
    xs.mark_sharding(xa, xla_mesh, ("data", None))
    assert torch.equal((xa * 2).cpu(), a * 2)


@given(st.just(0))
@pytest.mark.xla(spmd=True)
def test_spmd_session_profile(zero):  # drawn in the worker, under the session's profile
    assert settings.get_current_profile_name().startswith("xla-"), settings.default
    assert settings.default.deadline is None


def test_mesh_unmarked(xla_mesh):
    pass  # an error at setup: a mesh needs SPMD


def test_plain_calls_use_spmd():
    xr.use_spmd()  # refused: this process runs the tests after it


@pytest.mark.skipif(not xlasim.is_emulated(), reason="natively a rank's process is xmp.spawn's")
@pytest.mark.xla
def test_rank_calls_use_spmd(xla_rank):
    xr.use_spmd()


@pytest.mark.xla(spmd=True)
def test_spmd_fails():
    devices = xr.global_runtime_device_count()
    assert devices == -1


@pytest.mark.xla(spmd=True)
def test_spmd_crashes():
    os.kill(os.getpid(), signal.SIGSEGV)


@pytest.mark.xla(spmd=True, timeout=5)
def test_spmd_hangs():
    torch_xla.sync()  # recorded before the hang: the trace still holds it
    time.sleep(600)


@pytest.mark.xla(spmd=True)
def test_spmd_after_the_crash():
    assert xr.is_spmd()


def test_plain_last():
    spmd_off()


@pytest.mark.xla
def test_replica_last(xla_rank):
    spmd_off()
