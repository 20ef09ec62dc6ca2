"""Inner tests for test_emulated.py: run by pytester with --xla-devices=8, outcomes checked there."""

import threading

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import xlasim

SHARED = []


@pytest.fixture
def payload():
    obj = {"value": 10}
    SHARED.append(obj)
    return obj


@pytest.mark.xla
def test_all_ranks_pass(xla_rank, payload):
    assert (xla_rank.rank, xla_rank.world_size) == (xr.global_ordinal(), 8)
    assert xla_rank.device == torch.device(f"xla:{xla_rank.rank}")
    total = xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=xla_rank.device) * xla_rank.rank)
    assert total.cpu().tolist() == [28.0, 28.0]
    assert payload is SHARED[-1]  # one fixture value, handed to every rank


@pytest.mark.xla(devices=4)
@pytest.mark.parametrize("scale", [2, 3])
def test_parametrize_on_sub_world(xla_rank, scale):
    assert xr.world_size() == 4
    total = xm.all_reduce(xm.REDUCE_SUM, torch.full((1,), float(scale), device=xla_rank.device))
    assert total.item() == 4 * scale


@pytest.mark.xla(devices=[1, 2, 16])
def test_sizes(xla_rank):
    assert len(xm.get_xla_supported_devices()) == xla_rank.world_size


@pytest.mark.xla(devices=4)
def test_rank_3_fails(xla_rank):
    print(f"rank {xla_rank.rank} says hello")
    assert xla_rank.rank != 3, "rank three is broken"


@pytest.mark.xla(devices=2)
def test_every_rank_skips(xla_rank):
    pytest.skip("not on this slice")


@pytest.mark.xla(devices=2)
def test_one_rank_skips(xla_rank):
    if xla_rank.rank == 0:
        pytest.skip("only rank 0 leaves")
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device))


@pytest.mark.xla(devices=2)
@pytest.mark.xfail(raises=ValueError, strict=True)
def test_xfail_on_a_rank(xla_rank):
    if xla_rank.rank == 1:
        raise ValueError("expected")


@pytest.mark.xla(devices=2)
@pytest.mark.xla_timeout(2)
def test_hangs(xla_rank):
    if xla_rank.rank == 1:
        threading.Event().wait()  # never returns; the run is bounded by the marker
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device))


@pytest.mark.xla(devices=2)
def test_after_the_hang(xla_rank):
    assert xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device)).item() == 2


def test_rank_needs_marker(xla_rank):
    pass


@pytest.mark.xla(devices=2)
@given(st.integers())
def test_given_on_ranks(xla_rank, x):
    pass


def times_rank(x):
    return x * (xlasim.current().rank + 1)


@given(st.integers(-1000, 1000))
def test_hypothesis_through_world(xla_world, x):
    assert settings().deadline is None
    assert settings.get_current_profile_name() == "xla-emulated"
    assert xla_world.run(times_rank, x) == [x * (r + 1) for r in range(8)]
    assert xla_world.run_on(3, times_rank, x) == [x, 2 * x, 3 * x]


def fails_on_rank_5():
    assert xr.global_ordinal() != 5


def test_world_run_failure(xla_world):
    xla_world.run(fails_on_rank_5)


def step(size):
    x = torch.ones(size, device=xlasim.current().device)
    y = (x * 2).sum()
    torch_xla.sync()
    return y


@pytest.mark.xla(devices=2)
@pytest.mark.xla_metrics(compilations=1)
def test_recompiling_loop(xla_rank):
    for size in range(1, 4):  # a new shape each step: a new graph each step
        step(size)


@pytest.mark.xla(devices=2)
@pytest.mark.xla_metrics(compilations=1, fallbacks=0)
def test_steady_loop(xla_rank):
    for _ in range(3):
        step(7)


def nonzero():
    x = torch.tensor([0.0, 1.0, 2.0], device=xlasim.current().device)
    return x.nonzero().cpu().tolist()


def test_fallbacks_counted(xla_world, xla_metrics):
    # One rank runs nonzero's first fallback: two threads running it at once can crash torch_xla
    # 2.9 (its fallback-counter map is unguarded, docs/fidelity.md).
    xla_world.run_on(1, nonzero)
    xla_world.run_on(2, step, 9)
    xla_metrics.reset()
    xla_world.run_on(2, step, 9)
    xla_metrics.check(compilations=0)
    xla_world.run_on(2, nonzero)
    assert xla_metrics.fallbacks == {"aten::nonzero": 2}
    xla_metrics.check(fallbacks=0)
