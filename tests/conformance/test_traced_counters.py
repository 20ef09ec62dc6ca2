"""torch_xla's metrics count every collective it traces, under the name of the C++ function
that traced it (`xla::AllReduce`, `xla::AllGatherOut`, ...; `xla::all_reduce` for the
functional ops that torch.distributed and dynamo use), and torch_xla's own tests assert those
names (`test/pjrt/test_collective_ops_tpu.py`). Emulated collectives count alike."""

import pytest
import torch
import torch.distributed as dist
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.debug.metrics as met

DEVICES = 4


#: The counters of torch_xla's traced collectives (other `xla::` counters count the ops around).
COLLECTIVE_COUNTERS = {
    f"xla::{name}"
    for name in (
        "AllReduce",
        "AllReduceInPlace",
        "AllGather",
        "AllGatherOut",
        "ReduceScatter",
        "ReduceScatterOut",
        "AllToAll",
        "all_reduce",
        "all_gather_into_tensor",
        "reduce_scatter_tensor",
        "all_to_all_single",
    )
}


def counted_after(call):
    """The collective counters one call on every rank leaves, starting from cleared metrics."""

    def fn(rank: int):
        t = torch.arange(8.0, device=torch_xla.device()) + rank
        xm.rendezvous("before clearing")  # no rank clears what another already counted
        if rank == 0:
            met.clear_all()
        xm.rendezvous("cleared")
        call(t)
        xm.rendezvous("called")
        names = [name for name in met.counter_names() if name in COLLECTIVE_COUNTERS]
        return {name: met.counter_value(name) for name in names}

    return fn


FORMS = {
    "all_reduce tensor": (lambda t: xm.all_reduce(xm.REDUCE_SUM, t), "xla::AllReduce"),
    "all_reduce list": (lambda t: xm.all_reduce(xm.REDUCE_SUM, [t]), "xla::AllReduceInPlace"),
    "all_gather": (lambda t: xm.all_gather(t), "xla::AllGather"),
    "all_gather output": (
        lambda t: xm.all_gather(t, output=torch.zeros(8 * DEVICES, device=t.device)),
        "xla::AllGatherOut",
    ),
    "reduce_scatter": (
        lambda t: xm.reduce_scatter(xm.REDUCE_SUM, t, 1.0, 0, DEVICES),
        "xla::ReduceScatter",
    ),
    "reduce_scatter output": (
        lambda t: xm.reduce_scatter(
            xm.REDUCE_SUM, t, 1.0, 0, DEVICES, output=torch.zeros(2, device=t.device)
        ),
        "xla::ReduceScatterOut",
    ),
    "all_to_all": (lambda t: xm.all_to_all(t, 0, 0, DEVICES), "xla::AllToAll"),
}


@pytest.mark.parametrize("form", FORMS)
def test_xm_collectives_count_as_torch_xla_traces_them(world, form):
    call, name = FORMS[form]
    counters = world.run(counted_after(call), size=DEVICES)
    # Ranks that share a process share its counters, as torch_xla's metrics are per process.
    assert all(found == {name: DEVICES} for found in counters), counters


def functional_ops(t: torch.Tensor) -> None:
    dist.init_process_group("xla", init_method="xla://")
    try:
        name = dist.group.WORLD.group_name
        ops = torch.ops._c10d_functional
        ops.wait_tensor(ops.all_reduce(t, "sum", name))
        ops.all_gather_into_tensor(t, DEVICES, name)
        ops.reduce_scatter_tensor(t, "sum", DEVICES, name)
        ops.all_to_all_single(t, [2] * DEVICES, [2] * DEVICES, name)
    finally:
        dist.destroy_process_group()


def test_functional_collectives_count_under_their_op_names(world):
    counters = world.run(counted_after(functional_ops), size=DEVICES)
    expected = {
        f"xla::{op}": DEVICES
        for op in (
            "all_reduce",
            "all_gather_into_tensor",
            "reduce_scatter_tensor",
            "all_to_all_single",
        )
    }
    assert all(found == expected for found in counters), counters


def test_clearing_and_the_report_include_emulated_counters(world):
    def fn(rank: int):
        xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=torch_xla.device()))
        xm.rendezvous("counted")
        reported = "Counter: xla::AllReduce" in met.metrics_report()
        xm.rendezvous("reported")
        if rank == 0:
            met.clear_counters()
        xm.rendezvous("cleared")
        return reported, "xla::AllReduce" in met.counter_names()

    assert world.run(fn, size=DEVICES) == [(True, False)] * DEVICES
