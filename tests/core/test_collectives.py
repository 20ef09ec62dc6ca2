"""Every emulated collective against a NumPy reference, on worlds of 1, 2, 3 and 8 cores."""

import numpy as np
import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm

SIZES = [1, 2, 3, 8]
NP_REDUCE = {
    "sum": np.add,
    "mul": np.multiply,
    "min": np.minimum,
    "max": np.maximum,
    "and": np.bitwise_and,
    "or": np.bitwise_or,
}


def rank_data(rank: int, shape=(3, 4), dtype=np.float32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(1000 * seed + rank)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(-50, 50, size=shape).astype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) > 0.5
    return rng.standard_normal(shape).astype(dtype)


def reference_reduce(op: str, arrays: list[np.ndarray], scale: float = 1.0) -> np.ndarray:
    """Rank-order reduction: ((x0 op x1) op x2) ..., as a TPU-faithful emulator must do it."""
    result = arrays[0].copy()
    for array in arrays[1:]:
        result = NP_REDUCE[op](result, array)
    return result * np.float32(scale) if scale != 1.0 else result


def on_device(array: np.ndarray, dtype: torch.dtype | None = None) -> torch.Tensor:
    tensor = torch.from_numpy(array)
    return (tensor.to(dtype) if dtype else tensor).to(torch_xla.device())


def groups_for(size: int, kind: str):
    if kind == "all" or size == 1:
        return None
    if kind == "halves" and size % 2 == 0:
        half = size // 2
        return [list(range(half)), list(range(half, size))]
    if kind == "strided" and size % 2 == 0:
        return [list(range(0, size, 2)), list(range(1, size, 2))]
    return None


def group_of(rank: int, size: int, groups) -> list[int]:
    if groups is None:
        return list(range(size))
    return next(g for g in groups if rank in g)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("op", ["sum", "mul", "min", "max"])
def test_all_reduce_float_matches_numpy_bit_for_bit(world, size, op):
    def fn(rank):
        result = xm.all_reduce(op, on_device(rank_data(rank)))
        return str(result.device), result.dtype, result.cpu().numpy()

    results = world.run(fn, size=size)
    expected = reference_reduce(op, [rank_data(r) for r in range(size)])
    for rank, (device, dtype, value) in enumerate(results):
        assert device == f"xla:{rank}"
        assert dtype == torch.float32
        np.testing.assert_array_equal(value, expected)


@pytest.mark.parametrize("size", [2, 3, 8])
@pytest.mark.parametrize("op", ["and", "or", "sum", "max"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_all_reduce_integers(world, size, op, dtype):
    def fn(rank):
        return xm.all_reduce(op, on_device(rank_data(rank, dtype=dtype))).cpu().numpy()

    expected = reference_reduce(op, [rank_data(r, dtype=dtype) for r in range(size)])
    for value in world.run(fn, size=size):
        assert value.dtype == dtype
        np.testing.assert_array_equal(value, expected)


@pytest.mark.parametrize(
    "op,combine",
    [
        ("sum", np.logical_or),
        ("and", np.logical_and),
        ("or", np.logical_or),
        ("min", np.logical_and),
    ],
)
def test_all_reduce_bool_follows_xla_pred_semantics(world, op, combine):
    def fn(rank):
        return xm.all_reduce(op, on_device(rank_data(rank, dtype=np.bool_))).cpu().numpy()

    expected = combine.reduce([rank_data(r, dtype=np.bool_) for r in range(8)])
    for value in world.run(fn):
        assert value.dtype == np.bool_
        np.testing.assert_array_equal(value, expected)


@pytest.mark.parametrize("size", [2, 8])
@pytest.mark.parametrize("kind", ["halves", "strided"])
def test_all_reduce_groups_scale_and_list_in_place(world, size, kind):
    groups = groups_for(size, kind)

    def fn(rank):
        first, second = on_device(rank_data(rank)), on_device(rank_data(rank, seed=1))
        returned = xm.all_reduce("sum", [first, second], scale=0.5, groups=groups)
        assert returned[0] is first and returned[1] is second
        return first.cpu().numpy(), second.cpu().numpy()

    for rank, (first, second) in enumerate(world.run(fn, size=size)):
        members = group_of(rank, size, groups)
        for seed, value in ((0, first), (1, second)):
            expected = reference_reduce("sum", [rank_data(r, seed=seed) for r in members], 0.5)
            np.testing.assert_allclose(value, expected, rtol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_all_reduce_low_precision_keeps_dtype(world, dtype):
    def fn(rank):
        result = xm.all_reduce("sum", on_device(rank_data(rank), dtype))
        return result.dtype, result.cpu().float().numpy()

    expected = reference_reduce("sum", [rank_data(r) for r in range(8)])
    for result_dtype, value in world.run(fn):
        assert result_dtype == dtype
        np.testing.assert_allclose(value, expected, rtol=0.05, atol=0.1)


def test_all_reduce_rejects_bitwise_op_on_floats(world):
    def fn(rank):
        with pytest.raises(TypeError, match="integer or bool"):
            xm.all_reduce("and", on_device(rank_data(rank)))
        with pytest.raises(ValueError, match="unknown reduce type"):
            xm.all_reduce("avg", on_device(rank_data(rank)))

    world.run(fn, size=2)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_all_gather_concatenates_in_rank_order(world, size, dim):
    def fn(rank):
        return xm.all_gather(on_device(rank_data(rank)), dim=dim).cpu().numpy()

    expected = np.concatenate([rank_data(r) for r in range(size)], axis=dim)
    for value in world.run(fn, size=size):
        np.testing.assert_array_equal(value, expected)


def test_all_gather_groups_output_and_bfloat16(world):
    groups = groups_for(8, "strided")

    def fn(rank):
        value = on_device(rank_data(rank), torch.bfloat16)
        output = torch.zeros(12, 4, dtype=torch.bfloat16, device=torch_xla.device())
        returned = xm.all_gather(value, dim=0, groups=groups, output=output)
        assert returned is output
        return output.cpu().float().numpy()

    for rank, value in enumerate(world.run(fn)):
        members = group_of(rank, 8, groups)
        expected = np.concatenate(
            [torch.from_numpy(rank_data(r)).bfloat16().float().numpy() for r in members]
        )
        np.testing.assert_array_equal(value, expected)


@pytest.mark.parametrize("size", SIZES)
def test_reduce_scatter_gives_each_rank_its_shard(world, size):
    def fn(rank):
        value = on_device(rank_data(rank, shape=(size * 2, 3)))
        return (
            xm.reduce_scatter("sum", value, scale=1.0, scatter_dim=0, shard_count=size)
            .cpu()
            .numpy()
        )

    reduced = reference_reduce("sum", [rank_data(r, shape=(size * 2, 3)) for r in range(size)])
    for rank, value in enumerate(world.run(fn, size=size)):
        np.testing.assert_array_equal(value, reduced[2 * rank : 2 * rank + 2])


def test_reduce_scatter_list_groups_output(world):
    groups = groups_for(8, "halves")

    def fn(rank):
        inputs = [
            on_device(rank_data(rank, shape=(3, 8))),
            on_device(rank_data(rank, shape=(3, 4), seed=1)),
        ]
        outputs = [
            torch.zeros(3, 2, device=torch_xla.device()),
            torch.zeros(3, 1, device=torch_xla.device()),
        ]
        returned = xm.reduce_scatter(
            "max", inputs, scale=1.0, scatter_dim=1, shard_count=4, groups=groups, output=outputs
        )
        assert returned is outputs
        return [o.cpu().numpy() for o in outputs]

    for rank, (first, second) in enumerate(world.run(fn)):
        members = group_of(rank, 8, groups)
        index = members.index(rank)
        big = reference_reduce("max", [rank_data(r, shape=(3, 8)) for r in members])
        small = reference_reduce("max", [rank_data(r, shape=(3, 4), seed=1) for r in members])
        np.testing.assert_array_equal(first, big[:, 2 * index : 2 * index + 2])
        np.testing.assert_array_equal(second, small[:, index : index + 1])


@pytest.mark.parametrize("size", SIZES)
def test_all_to_all_transposes_pieces(world, size):
    def fn(rank):
        value = on_device(rank_data(rank, shape=(size, 2)))
        return (
            xm.all_to_all(value, split_dimension=0, concat_dimension=1, split_count=size)
            .cpu()
            .numpy()
        )

    inputs = [rank_data(r, shape=(size, 2)) for r in range(size)]
    for rank, value in enumerate(world.run(fn, size=size)):
        expected = np.concatenate(
            [inputs[source][rank : rank + 1] for source in range(size)], axis=1
        )
        np.testing.assert_array_equal(value, expected)


@pytest.mark.parametrize("size", [2, 3, 8])
def test_collective_permute_ring_and_zeros_for_untargeted(world, size):
    ring = [[r, (r + 1) % size] for r in range(size)]
    partial = [[0, 1]]

    def fn(rank):
        value = on_device(rank_data(rank))
        return xm.collective_permute(value, ring).cpu().numpy(), xm.collective_permute(
            value, partial
        ).cpu().numpy()

    for rank, (shifted, partly) in enumerate(world.run(fn, size=size)):
        np.testing.assert_array_equal(shifted, rank_data((rank - 1) % size))
        expected = rank_data(0) if rank == 1 else np.zeros((3, 4), np.float32)
        np.testing.assert_array_equal(partly, expected)


@pytest.mark.parametrize("size", [1, 3, 8])
def test_collective_broadcast_in_place_from_any_root(world, size):
    root = size - 1

    def fn(rank):
        tensors = [on_device(rank_data(rank)), on_device(rank_data(rank, dtype=np.int32))]
        xm.collective_broadcast(tensors, root_ordinal=root)
        return [t.cpu().numpy() for t in tensors]

    for floats, ints in world.run(fn, size=size):
        np.testing.assert_array_equal(floats, rank_data(root))
        np.testing.assert_array_equal(ints, rank_data(root, dtype=np.int32))


def test_send_recv_by_channel(world):
    def fn(rank):
        device = torch_xla.device()
        if rank == 0:
            xm.send(on_device(rank_data(0)), channel_id=7)
            return None
        if rank == 1:
            output = torch.zeros(3, 4, device=device)
            return xm.recv(output, channel_id=7).cpu().numpy()
        return None

    np.testing.assert_array_equal(world.run(fn, size=2)[1], rank_data(0))


@pytest.mark.parametrize("size", SIZES)
def test_rendezvous_and_mesh_reduce(world, size):
    def fn(rank):
        payloads = xm.rendezvous("tag", payload=b"x" * rank)
        total = xm.mesh_reduce("mesh", rank + 1, sum)
        return payloads, total

    for payloads, total in world.run(fn, size=size):
        assert payloads == [b"x" * r for r in range(size)]
        assert total == size * (size + 1) // 2


def test_rendezvous_of_some_replicas_is_refused_as_by_torch_xla(world):
    def fn(rank):
        if rank in (1, 3):
            return xm.rendezvous("pair", payload=bytes([rank]), replicas=[3, 1])
        return None

    with pytest.raises(ValueError, match="Only global rendezvous is supported") as failure:
        world.run(fn, size=4)
    assert failure.value.ranks == [1, 3]


#: Each tensor collective called on a host tensor `x` (or with a host `output`), on a world of 2.
HOST_TENSOR_CALLS = [
    pytest.param("xm.all_reduce", lambda x: xm.all_reduce(xm.REDUCE_SUM, x), id="all_reduce"),
    pytest.param("xm.all_reduce", lambda x: xm.all_reduce(xm.REDUCE_SUM, [x]), id="list"),
    pytest.param("xm.all_gather", lambda x: xm.all_gather(x), id="all_gather"),
    pytest.param(
        "xm.all_gather",
        lambda x: xm.all_gather(x.to(torch_xla.device()), output=torch.zeros(4)),
        id="output",
    ),
    pytest.param(
        "xm.reduce_scatter",
        lambda x: xm.reduce_scatter(xm.REDUCE_SUM, x, 1.0, 0, 2),
        id="reduce_scatter",
    ),
    pytest.param("xm.all_to_all", lambda x: xm.all_to_all(x, 0, 0, 2), id="all_to_all"),
    pytest.param(
        "xm.collective_permute",
        lambda x: xm.collective_permute(x, [[0, 1], [1, 0]]),
        id="collective_permute",
    ),
    pytest.param("xm.collective_broadcast", lambda x: xm.collective_broadcast([x]), id="broadcast"),
    pytest.param("xm.send", lambda x: xm.send(x, 5), id="send"),
    pytest.param("xm.recv", lambda x: xm.recv(x, 5), id="recv"),
]


@pytest.mark.parametrize(("api", "call"), HOST_TENSOR_CALLS)
def test_a_host_tensor_is_refused_naming_the_rank_and_the_fix_as_a_tpu_refuses_it(world, api, call):
    """On a TPU a CPU tensor reaches torch.ops._c10d_functional with no process group, or
    torch_xla._XLAC's collectives, which take XLA tensors only: the call fails there, so it
    must fail here, before any rank waits for the others."""
    with pytest.raises(RuntimeError, match="got a tensor on cpu") as failure:
        world.run(lambda rank: call(torch.arange(2.0)), size=2)
    message = str(failure.value)
    assert f"{api} on rank " in message and "tensor.to(torch_xla.device())" in message
    assert failure.value.ranks == [0, 1]


def test_a_host_tensor_in_a_world_of_one_all_reduce_comes_back_as_torch_xla_returns_it(world):
    """torch_xla's all_reduce skips a world of 1 before it looks at the tensor: a clone."""
    host = torch.arange(3.0)
    (result,) = world.run(lambda rank: xm.all_reduce(xm.REDUCE_SUM, host), size=1)
    assert result.device.type == "cpu" and torch.equal(result, host) and result is not host


def test_optimizer_step_averages_gradients_and_broadcast_master_param(world):
    def fn(rank):
        device = torch_xla.device()
        model = torch.nn.Linear(4, 1, bias=False).to(device)
        with torch.no_grad():
            model.weight.fill_(float(rank))
        xm.broadcast_master_param(model)
        start = model.weight.detach().cpu().clone()
        optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
        model(torch.full((1, 4), float(rank + 1), device=device)).sum().backward()
        xm.optimizer_step(optimizer)
        return start, model.weight.detach().cpu()

    results = world.run(fn)
    # whole numbers: bf16 holds them, so the TPU's default precision multiplies them exactly
    mean_input = np.mean([r + 1 for r in range(8)])
    for start, weight in results:
        assert torch.equal(start, torch.zeros(1, 4))  # rank 0's value everywhere
        np.testing.assert_allclose(weight.numpy(), np.full((1, 4), -mean_input), rtol=1e-6)


def test_results_are_bit_identical_across_runs(world):
    def fn(rank):
        value = on_device(rank_data(rank, shape=(64,)) * 1e3)
        return xm.all_reduce("sum", value, scale=1 / 3).cpu().numpy().tobytes()

    first, second = world.run(fn), world.run(fn)
    assert first == second
    assert len(set(first)) == 1


def test_results_stay_independent_per_rank_after_in_place_updates(world):
    """Ranks receive views of one shared host result: an in-place update on one rank (with the
    graph executed) must not leak into another rank's result or into the next collective."""

    def fn(rank):
        result = xm.all_reduce("sum", on_device(rank_data(rank)))
        if rank == 0:
            result.mul_(100.0)
            result.add_(1.0)
            torch_xla.sync()
        xm.rendezvous("updated")
        return result.cpu().numpy()

    expected = reference_reduce("sum", [rank_data(r) for r in range(4)])
    results = world.run(fn, size=4)
    np.testing.assert_allclose(results[0], expected * 100 + 1, rtol=1e-6)
    for value in results[1:]:
        np.testing.assert_array_equal(value, expected)


@pytest.mark.parametrize("size", [1, 2])
def test_in_place_updates_after_broadcast_and_recv_keep_their_values(world, size):
    """Results never alias an XLA-owned buffer: repeated in-place steps stay exact."""

    def fn(rank):
        value = on_device(rank_data(rank))
        xm.collective_broadcast([value], root_ordinal=0)
        for _ in range(3):
            value.add_(1.0)
            torch_xla.sync()
        received = torch.zeros(3, 4, device=torch_xla.device())
        xm.send(value, channel_id=rank)
        xm.recv(received, channel_id=rank)
        value.mul_(2.0)
        received.add_(1.0)
        torch_xla.sync()
        return value.cpu().numpy(), received.cpu().numpy()

    for value, received in world.run(fn, size=size):
        np.testing.assert_allclose(value, (rank_data(0) + 3) * 2, rtol=1e-6)
        np.testing.assert_allclose(received, rank_data(0) + 4, rtol=1e-6)
