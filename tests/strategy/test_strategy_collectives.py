"""XLAStrategy's rank facts and collectives, on every rank of the session, whatever its size (1,
4 or 8 cores: expectations are computed from the world the test gets)."""

import pickle

import pytest
import torch
import torch_xla.runtime as xr
from torch.distributed import ReduceOp

from strategy import XLAStrategy


def launched() -> XLAStrategy:
    strategy = XLAStrategy()
    strategy.setup_environment()
    return strategy


@pytest.mark.xla
def test_rank_facts(xla_rank):
    strategy = launched()
    assert strategy.root_device == xla_rank.device
    assert strategy.world_size == xla_rank.world_size == xr.world_size()
    assert strategy.global_rank == xla_rank.rank
    assert strategy.local_rank == xla_rank.local_rank
    assert strategy.node_rank == xr.host_index()
    assert strategy.is_global_zero == (xla_rank.rank == 0)
    assert strategy.distributed_sampler_kwargs == {
        "num_replicas": xla_rank.world_size,
        "rank": xla_rank.rank,
    }


def test_rank_facts_before_launch():
    strategy = XLAStrategy()
    assert (strategy.world_size, strategy.global_rank, strategy.is_global_zero) == (
        len(strategy.parallel_devices),
        0,
        True,
    )
    with pytest.raises(RuntimeError, match="only known on a rank"):
        _ = strategy.root_device


def source(which: str, world_size: int) -> int:
    """A broadcast's source rank, named by its place in the world so that any size has it."""
    return {"first": 0, "middle": world_size // 2, "last": world_size - 1}[which]


@pytest.mark.xla(min_devices=2)
@pytest.mark.parametrize("src", ["first", "middle", "last"])
def test_broadcast_object_whose_pickled_size_differs_per_rank(xla_rank, src):
    strategy = launched()
    rank, src = xla_rank.rank, source(src, xla_rank.world_size)
    mine = {"rank": rank, "text": "x" * (1000 * rank + 1), "ranks": list(range(rank))}
    sizes = strategy.all_gather(torch.tensor(len(pickle.dumps(mine))))
    # the premise: every rank pickles to another size
    assert len(set(sizes.tolist())) == xla_rank.world_size

    got = strategy.broadcast(mine, src=src)

    assert got == {"rank": src, "text": "x" * (1000 * src + 1), "ranks": list(range(src))}


@pytest.mark.xla
def test_broadcast_object_holding_xla_tensors_lands_on_each_ranks_device(xla_rank):
    strategy = launched()
    src = source("last", xla_rank.world_size)
    mine = {"t": torch.full((3,), float(xla_rank.rank), device=xla_rank.device), "n": xla_rank.rank}
    got = strategy.broadcast(mine, src=src)
    assert got["n"] == src
    assert got["t"].device == xla_rank.device
    assert got["t"].cpu().tolist() == [float(src)] * 3


@pytest.mark.xla
@pytest.mark.parametrize("on_cpu", [False, True])
def test_broadcast_tensor_from_src_keeps_input_device(xla_rank, on_cpu):
    strategy = launched()
    rank, src = xla_rank.rank, source("last", xla_rank.world_size)
    # other ranks hold NaN: torch_xla's mask-and-sum broadcast would turn the result into NaN
    value = torch.full((2, 3), float(rank + 1) if rank == src else float("nan"))
    tensor = value if on_cpu else value.to(xla_rank.device)

    got = strategy.broadcast(tensor, src=src)

    assert got.device == tensor.device
    assert got.dtype == torch.float32
    assert torch.equal(got.cpu(), torch.full((2, 3), float(src + 1)))
    torch.testing.assert_close(tensor.cpu(), value, equal_nan=True, rtol=0, atol=0)  # untouched


@pytest.mark.xla
def test_broadcast_rejects_src_outside_the_world(xla_rank):
    strategy = launched()
    n = xla_rank.world_size
    with pytest.raises(
        ValueError, match=rf"src={n}\) on global rank {xla_rank.rank}.*0\.\.{n - 1}"
    ):
        strategy.broadcast("x", src=n)


def expected_reduction(op: str, n: int) -> list[float]:
    """What `op` makes of every rank's [rank + 1, -(rank + 1)] over ranks 0..n-1 (8 ranks: sum
    [36, -36], mean [4.5, -4.5], max [8, -1], min [1, -8]); + 1 keeps a world of one from
    reducing zeros, where max and min, sum and mean could not be told apart."""
    total = n * (n + 1) / 2
    return {
        "sum": [total, -total],
        "mean": [total / n, -total / n],
        "max": [float(n), -1.0],
        "min": [1.0, -float(n)],
    }[op]


REDUCE_CASES = [
    ("mean", "mean"),
    ("avg", "mean"),
    (None, "mean"),
    ("sum", "sum"),
    ("SUM", "sum"),
    ("max", "max"),
    ("min", "min"),
    (ReduceOp.SUM, "sum"),
    (ReduceOp.AVG, "mean"),
    (ReduceOp.MAX, "max"),
    (ReduceOp.MIN, "min"),
]


@pytest.mark.xla
@pytest.mark.parametrize(("reduce_op", "expected"), REDUCE_CASES)
@pytest.mark.parametrize("on_cpu", [False, True])
def test_reduce_op_and_result_device(xla_rank, reduce_op, expected, on_cpu):
    strategy = launched()
    device = torch.device("cpu") if on_cpu else xla_rank.device
    mine = float(xla_rank.rank + 1)
    value = torch.tensor([mine, -mine], device=device)

    reduced = strategy.reduce(value, reduce_op=reduce_op)

    assert reduced.device == device
    assert reduced.cpu().tolist() == expected_reduction(expected, xla_rank.world_size)


@pytest.mark.xla
def test_reduce_mean_of_integers_is_not_truncated(xla_rank):
    strategy = launched()
    # ranks 0..n-1 hold their rank + 1, an integer: the mean (n + 1) / 2 is a half for even n
    reduced = strategy.reduce(torch.tensor(xla_rank.rank + 1, device=xla_rank.device))
    assert reduced.dtype == torch.float32
    assert reduced.item() == (xla_rank.world_size + 1) / 2


@pytest.mark.xla
def test_reduce_returns_non_tensors_unchanged_and_rejects_unknown_ops(xla_rank):
    strategy = launched()
    marker = object()
    assert strategy.reduce(marker) is marker
    assert strategy.reduce(3.0, reduce_op="sum") == 3.0
    with pytest.raises(ValueError, match=rf"reduce_op='prod'.*global rank {xla_rank.rank}"):
        strategy.reduce(torch.ones(1, device=xla_rank.device), reduce_op="prod")
    with pytest.raises(ValueError, match="group=None"):
        strategy.reduce(torch.ones(1, device=xla_rank.device), group=[[0, 1]])


@pytest.mark.xla
@pytest.mark.parametrize("shape", [(), (3,), (2, 2)])
def test_all_gather_stacks_every_rank_on_the_input_device(xla_rank, shape):
    strategy = launched()
    for device in (xla_rank.device, torch.device("cpu")):
        tensor = torch.full(shape, float(xla_rank.rank), device=device)
        gathered = strategy.all_gather(tensor)
        assert gathered.shape == (xla_rank.world_size, *shape)
        assert gathered.device == device
        assert not gathered.requires_grad
        for rank in range(xla_rank.world_size):
            assert torch.equal(gathered[rank].cpu(), torch.full(shape, float(rank)))


@pytest.mark.xla
def test_all_gather_sync_grads_is_differentiable(xla_rank):
    strategy = launched()
    rank = xla_rank.rank
    x = torch.full((2,), float(rank), device=xla_rank.device, requires_grad=True)

    gathered = strategy.all_gather(x, sync_grads=True)
    # every rank weighs the rows differently: row r gets weight (r + 1) * (rank + 1)
    n = xla_rank.world_size
    weights = torch.arange(1.0, n + 1.0, device=xla_rank.device).unsqueeze(1) * (rank + 1)
    (gathered * weights).sum().backward()

    # each rank's input receives the gradient of its own row, as computed on that rank
    assert x.grad.cpu().tolist() == [float((rank + 1) ** 2)] * 2
    assert torch.equal(gathered.detach().cpu()[:, 0], torch.arange(float(n)))


@pytest.mark.xla
def test_barrier_waits_for_every_rank(xla_rank, tmp_path):
    strategy = launched()
    (tmp_path / f"arrived-{xla_rank.rank}").touch()
    strategy.barrier("arrivals")
    assert len(list(tmp_path.glob("arrived-*"))) == xla_rank.world_size
    strategy.barrier()
