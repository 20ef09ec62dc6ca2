"""Collectives in `torch.compile(backend="openxla")` programs on emulated ranks.

Every compiled program is called three times with new inputs: the openxla bridge caches XLA
programs on the first call, and a collective compiled into one would return the first call's
result forever. The world counts completed collectives, so each test also checks that a rank
met the others once per collective call, not in the bridge's analysis of a new graph.
"""

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_backend  # registers the "xla" backend
import torch_xla.runtime as xr
from torch.distributed import distributed_c10d as c10d
from torch_xla._internal import pjrt

import xlasim
from xlasim import UnsupportedCollectiveError

DEVICES = 8  # the session's world (tests/conftest.py)
CALLS = 3


def run(world: xlasim.World, fn, size: int = DEVICES) -> tuple[list, dict[str, int]]:
    """Per-rank results of `fn` and the collectives the run completed, by op."""
    before = world.collectives.copy()
    results = world.run(fn, size=size)
    return results, dict(world.collectives - before)


def inputs(rank: int, call: int) -> torch.Tensor:
    """A different [8] tensor on every rank and every call."""
    return torch.arange(8.0, device=torch_xla.device()) + 100 * call + rank


def cpu(values) -> list:
    return [v.cpu() for v in values]


# ------------------------------------------------------------------------------ xm


def gather_reduce_scatter(t: torch.Tensor):
    gathered = xm.all_gather(t * 2, dim=0)
    reduced = xm.all_reduce(xm.REDUCE_SUM, t)
    shard = xm.reduce_scatter(xm.REDUCE_SUM, t, 1.0, 0, DEVICES)
    return gathered + 1, reduced, shard


def compiled_xm(rank: int):
    program = torch.compile(gather_reduce_scatter, backend="openxla", fullgraph=True)
    return [cpu(program(inputs(rank, call))) for call in range(CALLS)]


def test_xm_gather_reduce_scatter_every_call(world):
    results, met = run(world, compiled_xm)
    assert met == {"all_gather": CALLS, "all_reduce": CALLS, "reduce_scatter": CALLS}
    for call in range(CALLS):
        rows = torch.stack([torch.arange(8.0) + 100 * call + r for r in range(DEVICES)])
        total = rows.sum(0)
        for rank, per_call in enumerate(results):
            gathered, reduced, shard = per_call[call]
            assert torch.equal(gathered, rows.flatten() * 2 + 1)
            assert torch.equal(reduced, total)
            assert torch.equal(shard, total[rank : rank + 1])


def in_place_and_groups(t: torch.Tensor):
    pair = [t.clone(), t * 2]
    xm.all_reduce(xm.REDUCE_MAX, pair)  # in place, into intermediates only
    halves = [[0, 1, 2, 3], [4, 5, 6, 7]]
    half_sum = xm.all_reduce(xm.REDUCE_SUM, t, scale=0.5, groups=halves)
    exchanged = xm.all_to_all(t, 0, 0, DEVICES)
    shifted = xm.collective_permute(t, [[r, (r + 1) % DEVICES] for r in range(DEVICES)])
    root = [t + 0]
    xm.collective_broadcast(root, root_ordinal=3)
    return pair[0], pair[1], half_sum, exchanged, shifted, root[0]


def compiled_in_place(rank: int):
    program = torch.compile(in_place_and_groups, backend="openxla", fullgraph=True)
    return [cpu(program(inputs(rank, call))) for call in range(CALLS)]


def test_xm_in_place_groups_and_exchanges_every_call(world):
    results, met = run(world, compiled_in_place)
    assert met == {
        "all_reduce": 3 * CALLS,  # the grouped one completes once per group
        "all_to_all": CALLS,
        "collective_permute": CALLS,
        "collective_broadcast": CALLS,
    }
    for call in range(CALLS):
        rows = torch.stack([torch.arange(8.0) + 100 * call + r for r in range(DEVICES)])
        for rank, per_call in enumerate(results):
            first, second, half_sum, exchanged, shifted, root = per_call[call]
            half = rows[:4] if rank < 4 else rows[4:]
            assert torch.equal(first, rows[-1])
            assert torch.equal(second, rows[-1] * 2)
            assert torch.equal(half_sum, half.sum(0) * 0.5)
            assert torch.equal(exchanged, rows[:, rank])
            assert torch.equal(shifted, rows[(rank - 1) % DEVICES])
            assert torch.equal(root, rows[3])


def compiled_gather_in_own_process():
    program = torch.compile(gather_reduce_scatter, backend="openxla", fullgraph=True)
    rank = xr.global_ordinal()
    return [cpu(program(inputs(rank, call))) for call in range(2)]


def test_xm_in_worker_processes(world):
    """The session's own world (one worker process per core by default), as launchers use it."""
    if xlasim.world().size != DEVICES:
        pytest.skip(f"the session's world has {xlasim.world().size} cores, not {DEVICES}")
    results = pjrt.run_multiprocess(compiled_gather_in_own_process)
    for call in range(2):
        rows = torch.stack([torch.arange(8.0) + 100 * call + r for r in range(DEVICES)])
        for rank, per_call in results.items():
            gathered, reduced, shard = per_call[call]
            assert torch.equal(gathered, rows.flatten() * 2 + 1)
            assert torch.equal(reduced, rows.sum(0))
            assert torch.equal(shard, rows.sum(0)[rank : rank + 1])


# ------------------------------------------------------------------------------ torch.distributed


def distributed_step(t: torch.Tensor, mine: torch.Tensor, gathered: torch.Tensor, shard):
    dist.all_reduce(t)  # in place, on a graph input
    dist.all_gather_into_tensor(gathered, mine)
    dist.reduce_scatter_tensor(shard, t * 1)
    group = dist.group.WORLD
    total = funcol.all_reduce(t, "max", group)
    rows = funcol.all_gather_tensor(t[:2], 0, group)
    return total + 1, rows


def compiled_distributed(rank: int):
    dist.init_process_group("xla", init_method="xla://")
    try:
        program = torch.compile(distributed_step, backend="openxla", fullgraph=True)
        results = []
        for call in range(CALLS):
            t = inputs(rank, call)
            gathered = torch.zeros(DEVICES, device=t.device)
            shard = torch.zeros(1, device=t.device)
            mine = torch.tensor([float(rank)], device=t.device)
            total, rows = program(t, mine, gathered, shard)
            results.append(cpu([t, gathered, shard, total, rows]))
        return results
    finally:
        dist.destroy_process_group()


def test_torch_distributed_and_functional_collectives_every_call(world):
    results, met = run(world, compiled_distributed)
    assert met == {"all_reduce": 2 * CALLS, "all_gather": 2 * CALLS, "reduce_scatter": CALLS}
    for call in range(CALLS):
        rows = torch.stack([torch.arange(8.0) + 100 * call + r for r in range(DEVICES)])
        total = rows.sum(0)
        for rank, per_call in enumerate(results):
            reduced, gathered, shard, maximum, ring = per_call[call]
            assert torch.equal(reduced, total)
            assert torch.equal(gathered, torch.arange(8.0))
            assert torch.equal(shard, total[rank : rank + 1] * DEVICES)
            assert torch.equal(maximum, total + 1)
            assert torch.equal(ring, total[:2].repeat(DEVICES))


def destroy_on_rank_zero_first(rank: int):
    dist.init_process_group("xla", init_method="xla://")
    name = dist.group.WORLD.group_name
    if rank == 0:
        dist.destroy_process_group()
    xm.rendezvous("rank 0 destroyed its group")
    if rank == 0:
        return None
    try:  # what compiled torch.distributed collectives do, when tracing and when running
        return dist.get_process_group_ranks(c10d._resolve_process_group(name))
    finally:
        dist.destroy_process_group()


def test_a_rank_destroying_its_group_keeps_the_others_names(world):
    results = world.run(destroy_on_rank_zero_first, size=4)
    assert results == [None] + [[0, 1, 2, 3]] * 3


def eager_c10d_functional(rank: int):
    dist.init_process_group("xla", init_method="xla://")
    try:
        ops = torch.ops._c10d_functional
        name = dist.group.WORLD.group_name
        t = torch.arange(4.0, device=torch_xla.device()) + 10 * rank
        reduced = ops.wait_tensor(ops.all_reduce(t, "sum", ""))  # torch_xla's own group name
        broadcast = ops.broadcast(t, 2, "default")
        gathered = ops.all_gather_into_tensor(t, 4, name)
        shard = ops.reduce_scatter_tensor(torch.arange(8.0, device=t.device), "sum", 4, name)
        exchanged = ops.all_to_all_single(t, [1] * 4, [1] * 4, name)
        (coalesced,) = ops.all_reduce_coalesced([t], "max", name)
        return cpu([reduced, broadcast, gathered, shard, exchanged, coalesced])
    finally:
        dist.destroy_process_group()


def test_eager_c10d_functional_ops_on_xla_tensors(world):
    results, met = run(world, eager_c10d_functional, size=4)
    assert met == {
        "all_reduce": 2,
        "collective_broadcast": 1,
        "all_gather": 1,
        "reduce_scatter": 1,
        "all_to_all": 1,
    }
    rows = torch.stack([torch.arange(4.0) + 10 * r for r in range(4)])
    for rank, (reduced, broadcast, gathered, shard, exchanged, coalesced) in enumerate(results):
        assert torch.equal(reduced, rows.sum(0))
        assert torch.equal(broadcast, rows[2])
        assert torch.equal(gathered, rows.flatten())
        assert torch.equal(shard, torch.arange(8.0)[2 * rank : 2 * rank + 2] * 4)
        assert torch.equal(exchanged, rows[:, rank])
        assert torch.equal(coalesced, rows[3])


# ------------------------------------------------------------------------------ what is refused


def direct_xla_all_reduce(rank: int):
    t = torch.ones(2, device=torch_xla.device())
    return torch_xla._XLAC._xla_all_reduce(xm.REDUCE_SUM, t, 1.0, [], True).cpu()


def test_xla_level_collective_on_a_rank_raises(world):
    with pytest.raises(xlasim.RankFailedError) as caught:
        world.run(direct_xla_all_reduce, size=2)
    errors = caught.value.failures.values()
    assert all(isinstance(e, UnsupportedCollectiveError) for e in errors)
    assert "xm.all_reduce" in str(next(iter(errors)))


def compiled_dynamic(rank: int):
    program = torch.compile(
        lambda t: xm.all_reduce(xm.REDUCE_SUM, t) + 1, backend="openxla", dynamic=True
    )
    try:
        return program(inputs(rank, 0)).cpu()
    except UnsupportedCollectiveError as error:  # every rank ends its call (no abort)
        return error


def test_dynamic_shapes_raise_a_clear_error(world):
    results = world.run(compiled_dynamic)
    assert all(isinstance(r, UnsupportedCollectiveError) for r in results)
    assert "dynamic=False" in str(results[0])
    # dynamic=True sets two process-wide settings around each call: concurrent calls on ranks
    # must leave them as they found them, or every later compilation is dynamic
    assert torch._dynamo.config.assume_static_by_default


def send_then_add(t: torch.Tensor):
    xm.send(t, 7)
    return t + 1


def send_then_add_in_one_graph(t: torch.Tensor):
    xm.send(t, 7)
    return t + 1


def compiled_send(rank: int, fn, fullgraph: bool):
    program = torch.compile(fn, backend="openxla", fullgraph=fullgraph)
    if rank == 0:
        return program(inputs(rank, 0)).cpu()
    return xm.recv(torch.zeros(8, device=torch_xla.device()), 7).cpu()


def test_point_to_point_runs_between_graphs_and_fullgraph_says_why(world):
    sent, received = world.run(compiled_send, args=(send_then_add, False), size=2)
    assert torch.equal(sent, torch.arange(8.0) + 1)
    assert torch.equal(received, torch.arange(8.0))
    with pytest.raises(xlasim.RankFailedError, match=r"xm\.send cannot be a node"):
        world.run(compiled_send, args=(send_then_add_in_one_graph, True), size=1)


# ------------------------------------------------------------------------------ ranks are threads


def reduce_plus_one(t: torch.Tensor):
    return xm.all_reduce(xm.REDUCE_SUM, t) + 1


def compiled_reduce(rank: int):
    program = torch.compile(reduce_plus_one, backend="openxla", fullgraph=True)
    return program(inputs(rank, 0)).cpu()


def test_a_rank_runs_while_another_thread_fx_traces(world, monkeypatch):
    """A compiled function refuses to run during an FX trace, going by a process-wide flag that
    every compilation raises: a rank must not take another thread's trace for its own."""
    monkeypatch.setattr(torch.fx._symbolic_trace, "_is_fx_tracing_flag", True)
    results = world.run(compiled_reduce, size=2)
    assert all(torch.equal(r, torch.arange(8.0) * 2 + 2) for r in results)
