"""torch_xla's own collectives (`xm.*`), as user code calls them, over drawn world sizes, replica
groups, shapes, dtypes (float32, bfloat16, int32), reduce types and scales: every rank's result
equals NumPy's, and the collectives compose as their algebra says.

Each example is drawn in the parent and run on every rank of a (sub-)world with
`xla_world.run_on`; rank functions are module-level so the native backend can pickle them.
"""

from __future__ import annotations

import os

import numpy as np
import numpy_reference as reference
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from drawing import (
    ARITHMETIC_REDUCE_TYPES,
    FLOAT_DTYPES,
    as_lists,
    budget,
    collective_inputs,
    permutation_pairs,
    ring,
)
from hypothesis import given
from hypothesis import strategies as st
from numpy_reference import as_numpy, assert_per_rank_equal


def _mine(inputs: list[torch.Tensor]) -> torch.Tensor:
    """This rank's input, on this rank's device."""
    return inputs[xr.global_ordinal()].to(torch_xla.device())


# ------------------------------------------------------------------------------ rank programs


def all_reduce_on_rank(inputs, reduce_type, scale, groups, in_place) -> torch.Tensor:
    x = _mine(inputs)
    if in_place:  # the list form reduces in place
        xm.all_reduce(reduce_type, [x], scale=scale, groups=groups)
        return x.cpu()
    return xm.all_reduce(reduce_type, x, scale=scale, groups=groups).cpu()


def sum_and_mean_on_rank(inputs, groups, group_size) -> tuple[torch.Tensor, torch.Tensor]:
    x = _mine(inputs)
    total = xm.all_reduce(xm.REDUCE_SUM, x, groups=groups)
    mean = xm.all_reduce(xm.REDUCE_SUM, x, scale=1.0 / group_size, groups=groups)
    return total.cpu(), mean.cpu()


def all_gather_on_rank(inputs, dim, groups) -> torch.Tensor:
    return xm.all_gather(_mine(inputs), dim=dim, groups=groups).cpu()


def reduce_scatter_on_rank(inputs, reduce_type, scale, dim, shard_count, groups) -> torch.Tensor:
    x = _mine(inputs)
    return xm.reduce_scatter(reduce_type, x, scale, dim, shard_count, groups=groups).cpu()


def scatter_gather_and_all_reduce_on_rank(inputs, dim, shard_count, groups):
    x = _mine(inputs)
    shard = xm.reduce_scatter(xm.REDUCE_SUM, x, 1.0, dim, shard_count, groups=groups)
    regathered = xm.all_gather(shard, dim=dim, groups=groups)
    return regathered.cpu(), xm.all_reduce(xm.REDUCE_SUM, x, groups=groups).cpu()


def all_to_all_twice_on_rank(inputs, split_dim, concat_dim, split_count, groups):
    x = _mine(inputs)
    once = xm.all_to_all(x, split_dim, concat_dim, split_count, groups=groups)
    twice = xm.all_to_all(once, concat_dim, split_dim, split_count, groups=groups)
    return once.cpu(), twice.cpu()


def permute_on_rank(inputs, pairs, times) -> torch.Tensor:
    x = _mine(inputs)
    for _ in range(times):
        x = xm.collective_permute(x, pairs)
    return x.cpu()


def broadcast_on_rank(inputs, root, groups) -> torch.Tensor:
    x = _mine(inputs)
    xm.collective_broadcast([x], root_ordinal=root, groups=groups)
    return x.cpu()


# ------------------------------------------------------------------------------ against NumPy


@budget(100)
@given(data=st.data())
def test_all_reduce_equals_numpy(xla_world, world_sizes, data):
    case = data.draw(collective_inputs(world_sizes), label="input")
    in_place = data.draw(st.booleans(), label="in_place")
    layout = case.layout

    results = xla_world.run_on(
        layout.world_size,
        all_reduce_on_rank,
        case.tensors(),
        case.reduce_type,
        case.scale,
        as_lists(layout.groups),
        in_place,
    )

    expected = reference.all_reduce(case.reduce_type, case.arrays, layout.groups, case.scale)
    assert_per_rank_equal(results, expected, case.dtype)


@budget(100)
@given(data=st.data())
def test_all_reduce_mean_is_sum_divided_by_world_size(xla_world, world_sizes, data):
    case = data.draw(collective_inputs(world_sizes, dtypes=FLOAT_DTYPES, scaled=False))
    layout = case.layout

    results = xla_world.run_on(
        layout.world_size,
        sum_and_mean_on_rank,
        case.tensors(),
        as_lists(layout.groups),
        layout.group_size,
    )

    tolerance = 2**-7 if case.dtype == torch.bfloat16 else 1e-6
    for rank, (total, mean) in enumerate(results):
        assert mean.dtype == case.dtype
        np.testing.assert_allclose(
            as_numpy(mean),
            as_numpy(total) / layout.group_size,
            rtol=tolerance,
            atol=tolerance,
            err_msg=f"on rank {rank}",
        )


@budget(100)
@given(data=st.data())
def test_all_gather_equals_numpy(xla_world, world_sizes, data):
    case = data.draw(collective_inputs(world_sizes, scaled=False))
    layout = case.layout
    # every rank contributes one group-size-th of the gathered dimension
    arrays = [np.split(array, layout.group_size, layout.dim)[0] for array in case.arrays]

    results = xla_world.run_on(
        layout.world_size,
        all_gather_on_rank,
        [torch.tensor(a, dtype=case.dtype) for a in arrays],
        layout.dim,
        as_lists(layout.groups),
    )

    expected = reference.all_gather(arrays, layout.dim, layout.groups)
    assert_per_rank_equal(results, expected, case.dtype)


@budget(100)
@given(data=st.data())
def test_reduce_scatter_equals_numpy(xla_world, world_sizes, emulated, data):
    # XLA's CPU backend has no bitwise reduce-scatter ("Unsupported reduction computation:
    # OrComputation"): natively on CPU devices, only the arithmetic reduce types are drawn.
    native_cpu = not emulated and os.environ.get("PJRT_DEVICE", "CPU").startswith("CPU")
    reduce_type = data.draw(st.sampled_from(ARITHMETIC_REDUCE_TYPES)) if native_cpu else None
    case = data.draw(collective_inputs(world_sizes, reduce_type=reduce_type))
    layout = case.layout

    results = xla_world.run_on(
        layout.world_size,
        reduce_scatter_on_rank,
        case.tensors(),
        case.reduce_type,
        case.scale,
        layout.dim,
        layout.group_size,
        as_lists(layout.groups),
    )

    expected = reference.reduce_scatter(
        case.reduce_type, case.arrays, case.scale, layout.dim, layout.groups
    )
    assert_per_rank_equal(results, expected, case.dtype)


@budget(100)
@given(data=st.data())
def test_all_to_all_equals_numpy_and_twice_with_dims_swapped_is_identity(
    xla_world, world_sizes, data
):
    case = data.draw(collective_inputs(world_sizes, reduce_type=xm.REDUCE_SUM, scaled=False))
    layout = case.layout
    concat_dim = data.draw(st.integers(0, len(layout.shape) - 1), label="concat_dim")

    results = xla_world.run_on(
        layout.world_size,
        all_to_all_twice_on_rank,
        case.tensors(),
        layout.dim,
        concat_dim,
        layout.group_size,
        as_lists(layout.groups),
    )

    once = reference.all_to_all(case.arrays, layout.dim, concat_dim, layout.groups)
    assert_per_rank_equal([r[0] for r in results], once, case.dtype)
    assert_per_rank_equal([r[1] for r in results], case.arrays, case.dtype)


@budget(100)
@given(data=st.data())
def test_collective_permute_equals_numpy(xla_world, world_sizes, data):
    case = data.draw(collective_inputs(world_sizes, grouped=False, scaled=False))
    pairs = data.draw(permutation_pairs(case.layout.world_size), label="pairs")

    results = xla_world.run_on(case.layout.world_size, permute_on_rank, case.tensors(), pairs, 1)

    assert_per_rank_equal(results, reference.collective_permute(case.arrays, pairs), case.dtype)


@budget(100)
@given(data=st.data())
def test_collective_broadcast_from_any_root(xla_world, world_sizes, data):
    case = data.draw(collective_inputs(world_sizes, scaled=False))
    layout = case.layout
    root = data.draw(st.integers(0, layout.world_size - 1), label="root")

    results = xla_world.run_on(
        layout.world_size, broadcast_on_rank, case.tensors(), root, as_lists(layout.groups)
    )

    expected = reference.collective_broadcast(case.arrays, root, layout.groups)
    assert_per_rank_equal(results, expected, case.dtype)


# ------------------------------------------------------------------------------ algebra


@budget(100)
@given(data=st.data())
def test_reduce_scatter_then_all_gather_equals_all_reduce(xla_world, world_sizes, data):
    case = data.draw(collective_inputs(world_sizes, reduce_type=xm.REDUCE_SUM, scaled=False))
    layout = case.layout

    results = xla_world.run_on(
        layout.world_size,
        scatter_gather_and_all_reduce_on_rank,
        case.tensors(),
        layout.dim,
        layout.group_size,
        as_lists(layout.groups),
    )

    for rank, (regathered, reduced) in enumerate(results):
        assert torch.equal(regathered, reduced), f"on rank {rank}"


@budget(100)
@given(data=st.data())
def test_ring_permute_applied_world_size_times_is_identity(xla_world, world_sizes, data):
    case = data.draw(collective_inputs(world_sizes, grouped=False, scaled=False))
    n = case.layout.world_size
    step = data.draw(st.integers(1, max(1, n - 1)), label="step")

    results = xla_world.run_on(n, permute_on_rank, case.tensors(), ring(n, step), n)

    assert_per_rank_equal(results, case.arrays, case.dtype)
