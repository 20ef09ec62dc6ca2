"""The list, `output=` and bucketized forms of torch_xla's collectives give torch_xla's shapes.

torch_xla's `_out` collectives make a caller's output tensor take the result's shape (a
full-size buffer handed to reduce_scatter ends up holding this rank's shard), and the
bucketized variants split a list into buckets of at most `bucket_cap_mb` and call the list
forms, so every shape rule of the list forms shows through them.
"""

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm

WORLD = 8
SHARD = 2


def rank_tensor(rank: int, index: int) -> torch.Tensor:
    """A (4, SHARD * WORLD, 3) input, different per rank and per list index."""
    base = torch.arange(4 * SHARD * WORLD * 3, dtype=torch.float32).reshape(4, SHARD * WORLD, 3)
    return base * (rank + 1) + index


def reduced_shard(rank: int, index: int) -> torch.Tensor:
    total = sum(rank_tensor(r, index) for r in range(WORLD))
    return total[:, rank * SHARD : (rank + 1) * SHARD, :]


@pytest.mark.parametrize("form", ["list", "bucketized", "bucketized-zero-cap"])
def test_reduce_scatter_into_full_size_outputs(world, form):
    def fn(rank):
        device = torch_xla.device()
        inputs = [rank_tensor(rank, i).to(device) for i in range(3)]
        outputs = [torch.zeros(4, SHARD * WORLD, 3, device=device) for _ in range(3)]
        args = (xm.REDUCE_SUM, inputs, 1.0, 1, WORLD)
        if form == "list":
            returned = xm.reduce_scatter(*args, output=outputs, pin_layout=False)
        else:
            cap = 0 if form == "bucketized-zero-cap" else 160
            returned = xm.reduce_scatter_bucketized(*args, output=outputs, bucket_cap_mb=cap)
        assert all(r is o for r, o in zip(returned, outputs))
        return [o.cpu() for o in outputs]

    for rank, outputs in enumerate(world.run(fn)):
        for index, output in enumerate(outputs):
            assert torch.equal(output, reduced_shard(rank, index))


def test_reduce_scatter_list_without_output_returns_shards(world):
    def fn(rank):
        inputs = [rank_tensor(rank, i).to(torch_xla.device()) for i in range(2)]
        return [r.cpu() for r in xm.reduce_scatter(xm.REDUCE_SUM, inputs, 1.0, 1, WORLD)]

    for rank, results in enumerate(world.run(fn)):
        assert [r.shape for r in results] == [torch.Size([4, SHARD, 3])] * 2
        assert torch.equal(results[1], reduced_shard(rank, 1))


@pytest.mark.parametrize("cap", [0, 160])
def test_all_gather_bucketized_with_and_without_outputs(world, cap):
    def fn(rank):
        device = torch_xla.device()
        inputs = [torch.full((2, 3), float(rank + i), device=device) for i in range(3)]
        plain = xm.all_gather_bucketized(inputs, dim=0, bucket_cap_mb=cap)
        outputs = [torch.zeros(1, device=device) for _ in range(3)]
        into = xm.all_gather_bucketized(inputs, dim=0, output=outputs, bucket_cap_mb=cap)
        assert all(r is o for r, o in zip(into, outputs))
        return [p.cpu() for p in plain], [o.cpu() for o in outputs]

    expected = [
        torch.cat([torch.full((2, 3), float(r + i)) for r in range(WORLD)]) for i in range(3)
    ]
    for plain, outputs in world.run(fn):
        for got in (plain, outputs):
            assert all(torch.equal(g, e) for g, e in zip(got, expected))
