"""Ranks are isolated as on a TPU v4+ VM by default; the threads mode shares, and says so.

On a v4+ VM each rank is a process: its own CPU generators, module globals, environment and
torch.distributed state. The session's world (`xlasim.world()`) is that by default; the
`world` fixture is the threads mode (`processes=1`), where ranks share all of it.
"""

import random
import sys
import warnings

import numpy as np
import pytest
import torch

import xlasim
from xlasim.emulation.seeding import SharedGeneratorWarning

#: Set by `remember` in whatever process a rank runs in.
REMEMBERED: dict[int, int] = {}


@pytest.fixture(scope="module")
def isolated():
    session = xlasim.world()
    if session.topology.cores_per_process != 1:
        pytest.skip(f"this session's ranks share processes ({session.topology.describe()})")
    return session


def seeded_draws(rank):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seed_everything(rank)
    draws = (torch.rand(4).tolist(), random.random(), np.random.rand(3).tolist())
    return draws, [str(w.message) for w in caught if w.category is SharedGeneratorWarning]


def test_every_rank_seeding_the_same_seed_draws_the_same_numbers(isolated):
    results = isolated.run(seeded_draws)
    draws = [draws for draws, _ in results]
    assert all(d == draws[0] for d in draws)
    assert not any(warned for _, warned in results)


def unseeded_draw(rank):
    return torch.rand(4).tolist(), random.random()


def test_unseeded_ranks_draw_different_numbers_in_every_launch(isolated):
    """A fresh process's generators start from fresh entropy (forked workers must not share
    the zygote's state, nor repeat the last launch's)."""
    first, second = isolated.run(unseeded_draw), isolated.run(unseeded_draw)
    assert len({str(d) for d in first + second}) == 2 * isolated.size  # every rank, both runs


def remember(rank):
    if rank == 0:
        REMEMBERED[0] = 42
    xlasim_barrier()
    return dict(sys.modules[__name__].REMEMBERED)


def xlasim_barrier():
    import torch_xla.core.xla_model as xm

    xm.rendezvous("globals")


@pytest.mark.xla_min_devices(2)  # rank 1 must exist to not see it
def test_a_module_global_set_by_rank_0_is_not_seen_by_rank_1(isolated):
    seen = isolated.run(remember)
    assert seen[0] == {0: 42}
    assert all(s == {} for s in seen[1:])
    assert REMEMBERED == {}  # nor by the launching process


def test_threads_mode_shares_globals_and_generators_and_warns(world):
    """The fast mode, documented as such: ranks are threads of one process."""
    try:
        seen = world.run(remember)
        assert all(s == {0: 42} for s in seen)
    finally:
        REMEMBERED.clear()
    # Warning filters are process-wide: catch the ranks' warnings here, around the launch.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        world.run(seed_everything)
    warned = [str(w.message) for w in caught if w.category is SharedGeneratorWarning]
    assert len(warned) == 3 * 8
    for name in ("torch.manual_seed", "random.seed", "numpy.random.seed"):
        assert sum(message.startswith(name + " at ") for message in warned) == 8
    assert all("test_isolation.py" in m and "torch.Generator()" in m for m in warned)


def seed_everything(rank):
    torch.manual_seed(1234)
    random.seed(1234)
    np.random.seed(1234)
