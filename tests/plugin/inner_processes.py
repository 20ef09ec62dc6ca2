"""Inner tests for test_plugin_processes.py: 8 cores in 4 worker processes on 2 emulated hosts.

The test bodies run in worker processes, which import this module from its path (asserts
rewritten); fixtures are resolved in the pytest process and pickled to the ranks.
"""

import os
import threading
from dataclasses import dataclass

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from hypothesis import given, settings
from hypothesis import strategies as st

import xlasim

PARENT_PID = os.getpid()  # re-evaluated when a worker imports this module


@dataclass
class Batch:  # a fixture value of a class of this module: the worker must import it to unpickle
    values: list


@pytest.fixture
def batch():
    return Batch([1.0, 2.0, 3.0])


@pytest.fixture
def parent_pid():
    return os.getpid()  # resolved in the pytest process


@pytest.mark.xla
def test_ranks_in_worker_processes(xla_rank, batch, parent_pid):
    assert os.getpid() != parent_pid and os.getpid() == PARENT_PID
    assert (xla_rank.rank, xla_rank.world_size) == (xr.global_ordinal(), 8)
    assert (xr.process_index(), xr.host_index()) == (xla_rank.rank // 2, xla_rank.rank // 4)
    assert xla_rank.local_rank == xla_rank.rank % 4
    assert xla_rank.device == torch.device(f"xla:{xla_rank.rank % 2}")
    local = torch.tensor(batch.values, device=xla_rank.device) * (xla_rank.rank + 1)
    total = xm.all_reduce(xm.REDUCE_SUM, local)
    assert total.cpu().tolist() == [v * 36 for v in batch.values]
    print(f"rank {xla_rank.rank} in process {xr.process_index()}")


class TestInAClass:
    factor = 2

    @pytest.mark.xla(devices=4)
    @pytest.mark.parametrize("scale", [3])
    def test_method_on_a_sub_world(self, xla_rank, scale):
        assert xr.world_size() == 4 and xr.process_count() == 2
        value = torch.full((1,), float(scale * self.factor), device=xla_rank.device)
        assert xm.all_reduce(xm.REDUCE_SUM, value).item() == 4 * scale * self.factor


@pytest.mark.xla(devices=4)
def test_rank_3_fails(xla_rank):
    print(f"rank {xla_rank.rank} says hello")
    assert xla_rank.rank != 3, "rank three is broken"


@pytest.mark.xla(devices=2)
def test_every_rank_skips(xla_rank):
    pytest.skip("not on this slice")


@pytest.mark.xla(devices=4)
def test_one_rank_skips(xla_rank):
    if xla_rank.rank == 0:
        pytest.skip("only rank 0 leaves")
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device))


@pytest.mark.xla(devices=4)
@pytest.mark.xfail(raises=ValueError, strict=True)
def test_xfail_on_a_rank(xla_rank):
    if xla_rank.rank == 2:
        raise ValueError("expected")


@pytest.fixture
def lock():
    return threading.Lock()


@pytest.mark.xla
def test_unpicklable_fixture(xla_rank, lock):
    pass


@pytest.mark.xla(devices=4)
@pytest.mark.xla_timeout(2)
def test_hangs(xla_rank):
    if xla_rank.rank == 3:
        threading.Event().wait()  # in its own process: the worker is replaced
    xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device))


@pytest.mark.xla
def test_after_the_hang(xla_rank):
    assert xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device)).item() == 8


def times_rank(x):
    return x * (xlasim.current().rank + 1)


def where():
    return os.getpid(), os.getcwd()


@given(st.integers(-1000, 1000))
@settings(max_examples=10)
def test_hypothesis_through_world(xla_world, x):
    assert xla_world.run(times_rank, x) == [x * (r + 1) for r in range(8)]
    assert xla_world.run_on(3, times_rank, x) == [x, 2 * x, 3 * x]


def test_hosts_have_their_own_directories(xla_world):
    seen = xla_world.run(where)
    assert len({pid for pid, _ in seen}) == 4 and os.getpid() not in {pid for pid, _ in seen}
    # The launching host keeps the launch directory (as a TPU VM does); the other host has
    # its own filesystem.
    assert {cwd for _, cwd in seen[:4]} == {os.getcwd()}
    assert len({cwd for _, cwd in seen[4:]}) == 1 and seen[4][1] != os.getcwd()


def test_lambda_is_refused(xla_world):
    xla_world.run(lambda: 1)


def fails_on_rank_5():
    assert xr.global_ordinal() != 5


def test_world_run_failure(xla_world):
    xla_world.run(fails_on_rank_5)


def step(size):
    x = torch.ones(size, device=torch_xla.device())
    y = (x * 2).sum()
    torch_xla.sync()
    return float(y.cpu())  # results are pickled back: a CPU value (`.item()` is a CPU fallback)


@pytest.mark.xla(devices=4)
@pytest.mark.xla_metrics(compilations=1)
def test_recompiling_loop(xla_rank):
    for size in range(1, 4):  # a new shape each step: a new graph each step, in every process
        step(size)


def nonzero():
    x = torch.tensor([0.0, 1.0, 2.0], device=torch_xla.device())
    return x.nonzero().cpu().tolist()


def nonzero_on_a_process_first_core():
    # Two rank threads of one process running nonzero's first fallback at once can crash torch_xla
    # 2.9 (its fallback-counter map is unguarded, docs/fidelity.md): one per process runs it first.
    return nonzero() if xr.global_ordinal() % 2 == 0 else None


def test_fallbacks_counted(xla_world, xla_metrics):
    xla_world.run_on(4, nonzero_on_a_process_first_core)
    xla_world.run_on(4, step, 9)
    xla_metrics.reset()
    xla_world.run_on(4, step, 9)
    xla_metrics.check(compilations=0)
    xla_world.run_on(4, nonzero)
    assert xla_metrics.fallbacks == {"aten::nonzero": 4}
    xla_metrics.check(fallbacks=0)
