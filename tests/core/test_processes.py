"""Multi-process and multi-host topologies: worker processes, per-host filesystems, and the same
failure semantics as the threaded world. Functions run on ranks are module-level: they are
pickled to the worker processes, as xmp.spawn requires on a TPU VM."""

import linecache
import os
import re
import threading
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

import xlasim
from fixtures import topology_pitfalls
from xlasim.base.topology import Topology
from xlasim.ranks.world import World

TOPOLOGY = Topology(8, processes=4, hosts=2)


@pytest.fixture(scope="module")
def pod(world):
    """8 cores in 4 worker processes (2 cores each) on 2 emulated hosts."""
    pod = World(TOPOLOGY, collective_timeout=3.0)
    yield pod
    pod.close()


def where_am_i(rank):
    return {
        "pid": os.getpid(),
        "cwd": os.getcwd(),
        "world_size": xr.world_size(),
        "ordinal": xr.global_ordinal(),
        "local_ordinal": xr.local_ordinal(),
        "process_index": xr.process_index(),
        "process_count": xr.process_count(),
        "host_index": xr.host_index(),
        "addressable": xr.addressable_device_count(),
        "local_devices": xr.local_device_count(),
        "master_local": xm.is_master_ordinal(local=True),
        "device": str(torch_xla.device()),
    }


def test_ranks_live_in_their_processes_and_hosts(pod):
    seen = pod.run(where_am_i)
    assert len({s["pid"] for s in seen}) == 4 and os.getpid() not in {s["pid"] for s in seen}
    for rank, s in enumerate(seen):
        assert (s["world_size"], s["ordinal"], s["process_count"]) == (8, rank, 4)
        assert s["process_index"] == rank // 2 and s["host_index"] == rank // 4
        assert s["local_ordinal"] == rank % 4 and s["master_local"] == (rank % 4 == 0)
        assert (s["addressable"], s["local_devices"]) == (2, 4)
        assert s["device"] == f"xla:{rank % 2}"
        assert seen[rank - rank % 2]["pid"] == s["pid"]
    assert len({s["cwd"] for s in seen}) == 2  # one working directory per host


def reduce_gather_scatter(rank):
    value = torch.arange(8, dtype=torch.float32).reshape(8, 1) * (rank + 1)
    device_value = value.to(torch_xla.device())
    return (
        xm.all_reduce("sum", device_value).cpu().numpy(),
        xm.all_gather(device_value, dim=1).cpu().numpy(),
        xm.reduce_scatter("sum", device_value, 1.0, 0, 8).cpu().numpy(),
    )


def test_collectives_across_processes_equal_the_threaded_results(pod, world):
    across = pod.run(reduce_gather_scatter)
    threaded = world.run(reduce_gather_scatter)
    for mine, reference in zip(across, threaded):
        for a, b in zip(mine, reference):
            np.testing.assert_array_equal(a, b)


def torch_distributed_sum(rank):
    dist.init_process_group("xla", init_method="xla://")
    try:
        value = torch.full((2,), float(rank), device=torch_xla.device())
        dist.all_reduce(value)
        dist.barrier()
        return value.cpu().tolist()
    finally:
        dist.destroy_process_group()


def test_torch_distributed_across_processes(pod):
    assert pod.run(torch_distributed_sum) == [[28.0, 28.0]] * 8


def raise_on_five(rank):
    if rank == 5:
        time.sleep(0.3)
        raise ValueError("rank five is broken")
    xm.all_reduce("sum", torch.ones(2, device=torch_xla.device()))


def test_failure_in_a_worker_process_is_named_with_its_traceback(pod):
    started = time.monotonic()
    with pytest.raises(xlasim.RankFailedError) as caught:
        pod.run(raise_on_five)
    assert time.monotonic() - started < 2.0
    assert caught.value.ranks == [5]
    assert "rank five is broken" in caught.value.tracebacks[5]
    assert "test_processes.py" in caught.value.tracebacks[5]


def mismatched_shape(rank):
    xm.all_reduce("sum", torch.ones(3 if rank == 6 else 2, device=torch_xla.device()))


def test_mismatch_across_processes_is_reported_at_once(pod):
    with pytest.raises(xlasim.CollectiveMismatchError) as caught:
        pod.run(mismatched_shape)
    assert "rank 6: all_reduce" in str(caught.value) and "float32(3,)" in str(caught.value)


_RELEASE = threading.Event()


def stuck_on_three(rank):
    if rank == 3:
        _RELEASE.wait(60)  # in its own process: only killing the process ends it
    xm.all_reduce("sum", torch.ones(1, device=torch_xla.device()))


def test_hang_in_a_worker_process_reports_its_stack_and_the_world_recovers(pod):
    started = time.monotonic()
    with pytest.raises(xlasim.CollectiveTimeoutError) as caught:
        pod.run(stuck_on_three)
    assert time.monotonic() - started < 3.0 + 3.0
    report = str(caught.value)
    assert "rank 3 never arrived" in report and "_RELEASE.wait(60)" in report
    assert pod.run(where_am_i)[3]["ordinal"] == 3


def test_shared_python_state_works_in_threads_but_not_across_processes(world, pod):
    """The fixture's launcher bug is invisible in the threaded world and loud across processes."""
    assert world.run(topology_pitfalls.collect_results_through_a_global)[0] == [
        10.0 * r for r in range(8)
    ]
    with pytest.raises(xlasim.RankFailedError, match=r"no result from ranks \[2, 3, 4, 5, 6, 7\]"):
        pod.run(topology_pitfalls.collect_results_through_a_global)


def seed_in_a_rank(rank):
    """Seeds as per-process training code does, recording the warnings the rank gets."""
    import warnings

    from xlasim.emulation.seeding import SharedGeneratorWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.manual_seed(1234)  # the line the warning must name
    return [str(w.message) for w in caught if w.category is SharedGeneratorWarning]


def test_seeding_in_a_rank_that_shares_its_process_warns_with_the_line_and_the_fix(pod):
    """Like a v2/v3 host, each worker process here holds 2 ranks, which share its CPU RNG."""
    warned = pod.run(seed_in_a_rank)
    assert all(len(messages) == 1 for messages in warned)
    message = warned[0][0]
    line = re.match(
        r"torch\.manual_seed at \S*test_processes\.py:(\d+) in seed_in_a_rank ", message
    )
    assert line, message
    assert "torch.manual_seed(1234)" in linecache.getline(__file__, int(line.group(1)))
    assert "all 2 ranks of this process share" in message
    assert "torch.Generator().manual_seed(s)" in message and "one process per core" in message


def test_checkpoint_written_on_host_zero_is_missing_on_host_one(world, pod, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert world.run(topology_pitfalls.save_on_rank_zero_then_load_everywhere) == [7.0] * 8
    with pytest.raises(xlasim.RankFailedError) as caught:
        pod.run(topology_pitfalls.save_on_rank_zero_then_load_everywhere)
    assert caught.value.ranks == [4, 5, 6, 7]
    assert "on host 1 cannot find 'checkpoint.pt'" in str(caught.value)


def test_unpicklable_function_is_a_clear_error(pod):
    with pytest.raises(xlasim.XlasimError, match="must be picklable"):
        pod.run(lambda rank: rank)
