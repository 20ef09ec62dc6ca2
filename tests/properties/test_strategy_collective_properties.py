"""`XLAStrategy`'s collectives (reduce, all_gather, broadcast of tensors and objects) over drawn
world sizes, dtypes, reduce ops, sources and input devices: values equal NumPy's, mean is sum
divided by the world size, and results come back on the input's device (Lightning PR #18275
handed back CPU tensors for XLA inputs)."""

from __future__ import annotations

import math

import numpy as np
import numpy_reference as reference
import torch
import torch_xla
import torch_xla.runtime as xr
from drawing import DTYPES, budget, exact_values, per_rank_arrays, to_tensors
from hypothesis import given
from hypothesis import strategies as st
from numpy_reference import as_numpy, assert_per_rank_equal
from torch.distributed import ReduceOp

from strategy import XLAStrategy

#: Every spelling of each op the strategy accepts, by what it computes.
REDUCE_OP_SPELLINGS = {
    "sum": ("sum", "SUM", ReduceOp.SUM),
    "mean": ("mean", "avg", "Mean", None, ReduceOp.AVG),
    "max": ("max", "MAX", ReduceOp.MAX),
    "min": ("min", "Min", ReduceOp.MIN),
}
SMALL_SHAPES = ((), (3,), (2, 2))


def launched() -> XLAStrategy:
    """A strategy as it is on a rank after the launch."""
    strategy = XLAStrategy()
    strategy.setup_environment()
    return strategy


def _mine(inputs: list[torch.Tensor], on_device: bool) -> torch.Tensor:
    tensor = inputs[xr.global_ordinal()]
    return tensor.to(torch_xla.device()) if on_device else tensor


@st.composite
def per_rank_tensors(draw: st.DrawFn, world_sizes, dtypes=DTYPES):
    """(world size, dtype, per-rank arrays) with exact sums, on one of a few small shapes."""
    world_size = draw(st.sampled_from(world_sizes), label="world_size")
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    shape = draw(st.sampled_from(SMALL_SHAPES), label="shape")
    arrays = draw(per_rank_arrays(world_size, shape, dtype, exact_values(dtype)), label="arrays")
    return world_size, dtype, arrays


def picklable_objects() -> st.SearchStrategy:
    """Nested Python values that compare equal after a pickle round trip (no NaN)."""
    leaves = (
        st.none()
        | st.booleans()
        | st.integers()
        | st.floats(allow_nan=False)
        | st.text(max_size=30)
        | st.binary(max_size=30)
    )
    return st.recursive(
        leaves,
        lambda children: (
            st.lists(children, max_size=4)
            | st.tuples(children, children)
            | st.dictionaries(st.text(max_size=5), children, max_size=4)
        ),
        max_leaves=12,
    )


# ------------------------------------------------------------------------------ rank programs


def reduce_on_rank(inputs, spellings, on_device) -> dict[str, tuple[torch.Tensor, bool]]:
    """Every op on the same input, each by its drawn spelling: (result, kept the device)."""
    tensor = _mine(inputs, on_device)
    strategy = launched()
    results = {}
    for meaning, reduce_op in spellings.items():
        reduced = strategy.reduce(tensor, reduce_op=reduce_op)
        results[meaning] = (reduced.cpu(), reduced.device == tensor.device)
    return results


def all_gather_on_rank(inputs, on_device) -> tuple[torch.Tensor, bool]:
    tensor = _mine(inputs, on_device)
    gathered = launched().all_gather(tensor)
    return gathered.cpu(), gathered.device == tensor.device


def broadcast_tensor_on_rank(inputs, src, on_device) -> tuple[torch.Tensor, bool, bool]:
    tensor = _mine(inputs, on_device)
    before = tensor.cpu().clone()
    received = launched().broadcast(tensor, src=src)
    after = tensor.cpu()
    untouched = bool(((after == before) | (after.isnan() & before.isnan())).all())
    return received.cpu(), received.device == tensor.device, untouched


def broadcast_object_on_rank(objects, src):
    """Broadcast this rank's drawn object, with a tensor of this rank's device inside: the
    source's tensor must land on every receiver's own device."""
    rank, device = xr.global_ordinal(), torch_xla.device()
    mine = {"value": objects[rank], "tensor": torch.full((2,), float(rank), device=device)}
    received = launched().broadcast(mine, src=src)
    tensor = received["tensor"]
    return received["value"], tensor.cpu().tolist(), tensor.device == device


# ------------------------------------------------------------------------------ properties


def spellings() -> st.SearchStrategy[dict[str, object]]:
    """One spelling of every op."""
    return st.fixed_dictionaries(
        {meaning: st.sampled_from(names) for meaning, names in REDUCE_OP_SPELLINGS.items()}
    )


@budget(100)
@given(data=st.data())
def test_reduce_equals_numpy_on_the_input_device(xla_world, world_sizes, data):
    world_size, dtype, arrays = data.draw(per_rank_tensors(world_sizes))
    ops = data.draw(spellings(), label="reduce_ops")
    on_device = data.draw(st.booleans(), label="on_device")

    results = xla_world.run_on(
        world_size, reduce_on_rank, to_tensors(arrays, dtype), ops, on_device
    )

    for meaning in ops:
        reduced = [result[meaning][0] for result in results]
        assert all(result[meaning][1] for result in results), f"{meaning}: left the device"
        if meaning != "mean":
            expected = reference.all_reduce(meaning, arrays, None)
            assert_per_rank_equal(reduced, expected, dtype)
            continue
        # a mean is a float even of integers, and is the sum divided by the world size
        mean_dtype = dtype if dtype.is_floating_point else torch.float32
        tolerance = 2**-7 if mean_dtype == torch.bfloat16 else 1e-6
        expected = reference.reduce("sum", arrays) / world_size
        for rank, result in enumerate(reduced):
            assert result.dtype == mean_dtype
            np.testing.assert_allclose(
                as_numpy(result), expected, rtol=tolerance, atol=tolerance, err_msg=f"rank {rank}"
            )


@budget(100)
@given(data=st.data())
def test_all_gather_stacks_every_rank_in_rank_order_on_the_input_device(
    xla_world, world_sizes, data
):
    world_size, dtype, arrays = data.draw(per_rank_tensors(world_sizes))
    on_device = data.draw(st.booleans(), label="on_device")

    results = xla_world.run_on(world_size, all_gather_on_rank, to_tensors(arrays, dtype), on_device)

    assert all(same_device for _, same_device in results), "a result left the input's device"
    stacked = np.stack(arrays)
    assert_per_rank_equal([gathered for gathered, _ in results], [stacked] * world_size, dtype)


@budget(100)
@given(data=st.data())
def test_broadcast_tensor_gives_every_rank_the_sources_whatever_the_others_hold(
    xla_world, world_sizes, data
):
    world_size, dtype, arrays = data.draw(per_rank_tensors(world_sizes))
    src = data.draw(st.integers(0, world_size - 1), label="src")
    on_device = data.draw(st.booleans(), label="on_device")
    tensors = to_tensors(arrays, dtype)
    if dtype.is_floating_point:  # NaN or inf elsewhere must not reach the result
        poison = data.draw(st.sampled_from([math.nan, math.inf, -math.inf]), label="poison")
        for rank in data.draw(st.sets(st.integers(0, world_size - 1)), label="poisoned"):
            if rank != src:
                tensors[rank] = torch.full_like(tensors[rank], poison)

    results = xla_world.run_on(world_size, broadcast_tensor_on_rank, tensors, src, on_device)

    for rank, (_, same_device, untouched) in enumerate(results):
        assert same_device, f"rank {rank}: the result left the input's device"
        assert untouched, f"rank {rank}: broadcast modified its input"
    assert_per_rank_equal([r[0] for r in results], [arrays[src]] * world_size, dtype)


@budget(100)
@given(data=st.data())
def test_broadcast_object_gives_every_rank_the_sources(xla_world, world_sizes, data):
    world_size = data.draw(st.sampled_from(world_sizes), label="world_size")
    objects = data.draw(
        st.lists(picklable_objects(), min_size=world_size, max_size=world_size), label="objects"
    )
    src = data.draw(st.integers(0, world_size - 1), label="src")

    results = xla_world.run_on(world_size, broadcast_object_on_rank, objects, src)

    for rank, (value, tensor, on_own_device) in enumerate(results):
        assert value == objects[src], f"rank {rank} received another rank's object"
        assert tensor == [float(src)] * 2, f"rank {rank} received another rank's tensor"
        assert on_own_device, f"rank {rank}: the received tensor is not on its own device"
