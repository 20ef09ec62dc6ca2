"""Every torch_xla launcher runs on the emulated world, and every launch starts fresh.

On a TPU VM each launch starts new processes: nothing of torch.distributed, the environment
or the XLA generator survives from one launch to the next.
"""

import os

import torch
import torch.distributed as dist
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch_xla._internal import pjrt

import xlasim


def ordinal_and_tag(tag):
    return (xr.global_ordinal(), xr.world_size(), tag)


def test_run_multiprocess_returns_results_by_ordinal(world):
    """torch_xla's own test launcher: no index passed, `{ordinal: result}` returned."""
    results = pjrt.run_multiprocess(ordinal_and_tag, "a")
    assert results == {rank: (rank, 8, "a") for rank in range(8)}
    assert pjrt.run_multiprocess(ordinal_and_tag, tag="kw")[5] == (5, 8, "kw")


def record_index_and_sum(index, tag, directory):
    ones = torch.ones(1, device=torch_xla.device())
    total = xm.all_reduce(xm.REDUCE_SUM, ones).cpu().item()
    (directory / f"{tag}-{index}").write_text(f"{xr.global_ordinal()} {total:g}")


def test_spawn_threads_and_pjrt_spawn_pass_the_index(world, tmp_path):
    pjrt.spawn_threads(record_index_and_sum, args=("threads", tmp_path))
    pjrt.spawn(record_index_and_sum, args=("spawn", tmp_path))
    seen = {path.name: path.read_text() for path in tmp_path.iterdir()}
    assert seen == {f"{tag}-{r}": f"{r} 8" for tag in ("threads", "spawn") for r in range(8)}


def join_process_group_and_reduce(index):
    dist.init_process_group("xla", init_method="xla://")
    value = torch.tensor([float(index)], device=torch_xla.device())
    dist.all_reduce(value)
    return value.cpu().item()


def test_each_launch_gets_fresh_torch_distributed_state(world):
    """Two launches that each initialize the `xla` process group (torch_xla's test_ddp.py does):
    the second must not find the first one's group names registered."""
    for _ in range(3):
        assert world.run(join_process_group_and_reduce) == [28.0] * 8
    assert not dist.is_initialized()


def change_environment(index):
    seen = (os.environ.get("XLASIM_TEST_KEPT"), os.environ.get("XLASIM_TEST_LEFTOVER"))
    xm.rendezvous("read")  # ranks that are threads share os.environ: all read before any writes
    os.environ["XLASIM_TEST_LEFTOVER"] = str(index)
    os.environ.pop("XLASIM_TEST_KEPT", None)
    return seen


def test_ranks_environment_changes_end_with_the_launch(world):
    """Ranks start with the launching process's environment; what they change dies with them
    (with ranks as threads, `os.environ` is restored when the launch ends)."""
    os.environ["XLASIM_TEST_KEPT"] = "yes"
    try:
        for launch_world in (world, xlasim.world()):
            for _ in range(2):
                assert launch_world.run(change_environment) == [("yes", None)] * 8
            assert "XLASIM_TEST_LEFTOVER" not in os.environ
            assert os.environ["XLASIM_TEST_KEPT"] == "yes"
    finally:
        os.environ.pop("XLASIM_TEST_KEPT", None)


def dropout_mask(index):
    device = torch_xla.device()
    mask = torch.nn.functional.dropout(torch.ones(64, device=device), p=0.5)
    return mask.cpu()


def test_the_xla_generator_starts_fresh_in_every_launch(world):
    """A fresh process draws the same XLA random numbers as the last fresh process did."""
    first, second = world.run(dropout_mask), world.run(dropout_mask)
    for rank in range(8):
        assert torch.equal(first[rank], second[rank])


def test_world_size_one_all_reduce_is_torch_xlas_clone(world):
    """torch_xla skips the reduction in a world of one: a clone comes back, `scale` ignored,
    lists untouched; XLA_ALWAYS_ALLREDUCE forces the real reduction."""

    def fn(index):
        device = torch_xla.device()
        value = torch.full((3,), 4.0, device=device)
        single = xm.all_reduce(xm.REDUCE_SUM, value, scale=0.5)
        listed = [torch.full((2,), 4.0, device=device)]
        returned = xm.all_reduce(xm.REDUCE_SUM, listed, scale=0.5)
        os.environ["XLA_ALWAYS_ALLREDUCE"] = "1"
        forced = xm.all_reduce(xm.REDUCE_SUM, value, scale=0.5)
        return single is value, single.cpu(), returned is listed, listed[0].cpu(), forced.cpu()

    is_same, single, same_list, listed, forced = world.run(fn, size=1)[0]
    assert not is_same and torch.equal(single, torch.full((3,), 4.0))
    assert same_list and torch.equal(listed, torch.full((2,), 4.0))
    assert torch.equal(forced, torch.full((3,), 2.0))
