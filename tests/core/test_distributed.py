"""torch.distributed with the xla backend on emulated ranks: each rank has its own process group."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch_xla
import torch_xla.distributed.xla_backend


def with_process_group(body):
    def fn(rank):
        dist.init_process_group("xla", init_method="xla://")
        try:
            return body(rank, torch_xla.device())
        finally:
            dist.destroy_process_group()

    return fn


def full(value, n=2, device=None):
    return torch.full((n,), float(value), device=device)


@pytest.mark.parametrize("size", [2, 3, 8])
def test_collectives_through_torch_distributed(world, size):
    def body(rank, device):
        assert (dist.get_rank(), dist.get_world_size()) == (rank, size)
        reduced = full(rank, device=device)
        dist.all_reduce(reduced)
        gathered = [torch.zeros(2, device=device) for _ in range(size)]
        dist.all_gather(gathered, full(rank, device=device))
        flat = torch.zeros(2 * size, device=device)
        dist.all_gather_into_tensor(flat, full(rank, device=device))
        shard = torch.zeros(2, device=device)
        dist.reduce_scatter_tensor(
            shard, torch.arange(2 * size, dtype=torch.float32, device=device)
        )
        broadcast = full(rank, 3, device)
        dist.broadcast(broadcast, src=size - 1)
        exchanged = torch.zeros(size, device=device)
        dist.all_to_all_single(
            exchanged, torch.arange(size, dtype=torch.float32, device=device) + 10 * rank
        )
        dist.barrier()
        return (
            reduced.cpu(),
            [g.cpu() for g in gathered],
            flat.cpu(),
            shard.cpu(),
            broadcast.cpu(),
            exchanged.cpu(),
            str(reduced.device),
        )

    total = sum(range(size))
    for rank, (reduced, gathered, flat, shard, broadcast, exchanged, device) in enumerate(
        world.run(with_process_group(body), size=size)
    ):
        assert device == f"xla:{rank}"
        assert reduced.tolist() == [total, total]
        assert [g.tolist() for g in gathered] == [[r, r] for r in range(size)]
        assert flat.tolist() == [r for r in range(size) for _ in range(2)]
        assert shard.tolist() == [size * (2 * rank), size * (2 * rank + 1)]
        assert broadcast.tolist() == [size - 1] * 3
        assert exchanged.tolist() == [rank + 10 * source for source in range(size)]


def test_send_recv_pairs(world):
    def body(rank, device):
        if rank % 2 == 0:
            dist.send(full(rank + 100, device=device), dst=rank + 1)
            return None
        received = torch.zeros(2, device=device)
        dist.recv(received, src=rank - 1)
        return received.cpu().tolist()

    results = world.run(with_process_group(body), size=4)
    assert results[1] == [100.0, 100.0] and results[3] == [102.0, 102.0]


def test_send_and_recv_move_the_random_stream_as_torch_xlas_do(world):
    """ProcessGroupXla's send and recv end every tensor with a step marker (torch_xla.sync()),
    which moves the device's random stream on (docs/fidelity.md, "Random streams"): after
    sending or receiving two tensors a rank is where two syncs leave a TPU process."""
    import torch_xla.core.xla_model as xm

    def body(rank, device):
        xm.set_rng_state(9)
        if rank == 0:
            dist.send(full(1, device=device), dst=1)
            dist.send(full(2, device=device), dst=1)
        else:
            received = torch.zeros(2, device=device)
            dist.recv(received, src=0)
            dist.recv(received, src=0)
        after_transfers = xm.get_rng_state()
        xm.set_rng_state(9)
        torch_xla.sync()
        torch_xla.sync()
        return after_transfers, xm.get_rng_state()

    for after_transfers, after_two_syncs in world.run(with_process_group(body), size=2):
        assert after_transfers == after_two_syncs


def test_barrier_is_a_real_rendezvous(world):
    import xlasim

    def body(rank, device):
        if rank != 1:
            dist.barrier()

    with pytest.raises(xlasim.CollectiveMismatchError, match="barrier"):
        world.run(with_process_group(body), size=3)


def test_process_groups_are_per_rank_and_fresh_each_run(world):
    def body(rank, device):
        return dist.is_initialized(), dist.get_rank()

    assert world.run(with_process_group(body), size=4) == [(True, r) for r in range(4)]
    assert not dist.is_initialized()  # the main thread never joined a group
    assert world.run(with_process_group(body), size=4) == [(True, r) for r in range(4)]


def test_all_reduce_bfloat16_via_distributed(world):
    def body(rank, device):
        value = torch.full((4,), rank + 0.5, dtype=torch.bfloat16, device=device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return value.dtype, value.cpu().float().numpy()

    for dtype, value in world.run(with_process_group(body)):
        assert dtype == torch.bfloat16
        np.testing.assert_array_equal(value, np.full(4, 7.5, np.float32))


def test_rooted_and_object_collectives(world):
    def body(rank, device):
        reduced = full(rank, device=device)
        dist.reduce(reduced, dst=1)
        gathered = [torch.zeros(2, device=device) for _ in range(4)] if rank == 0 else None
        dist.gather(full(rank, device=device), gather_list=gathered, dst=0)
        scattered = torch.zeros(2, device=device)
        sources = [full(10 + r, device=device) for r in range(4)] if rank == 0 else None
        dist.scatter(scattered, scatter_list=sources, src=0)
        exchanged = [torch.zeros(1, device=device) for _ in range(4)]
        dist.all_to_all(exchanged, [full(10 * rank + r, 1, device) for r in range(4)])
        broadcast = [{"from": rank, "pad": "x" * rank}]
        dist.broadcast_object_list(broadcast, src=2, device=device)
        return {
            "reduced": reduced.cpu().tolist(),
            "gathered": [g.cpu().tolist() for g in gathered] if gathered else None,
            "scattered": scattered.cpu().tolist(),
            "exchanged": [e.item() for e in exchanged],
            "broadcast": broadcast,
        }

    results = world.run(with_process_group(body), size=4)
    assert results[1]["reduced"] == [6.0, 6.0]
    assert results[0]["gathered"] == [[r, r] for r in range(4)]
    for rank, seen in enumerate(results):
        assert seen["scattered"] == [10.0 + rank] * 2
        assert seen["exchanged"] == [10.0 * source + rank for source in range(4)]
        assert seen["broadcast"] == [{"from": 2, "pad": "xx"}]


OBJECT_COLLECTIVES = {
    "all_gather_object": lambda rank: dist.all_gather_object([None] * 2, {"rank": rank}),
    "gather_object": lambda rank: dist.gather_object({"rank": rank}, [None] * 2, dst=0),
    "broadcast_object_list": lambda rank: dist.broadcast_object_list([{"rank": rank}], src=0),
}


@pytest.mark.parametrize("name", OBJECT_COLLECTIVES)
def test_object_collectives_without_a_device_are_refused_as_torch_xla_refuses_them(world, name):
    """torch registers no device for ProcessGroupXla, so its object collectives pack objects
    into CPU tensors, which torch_xla's collectives refuse (pytorch/xla#5492): on a TPU, and
    natively on a CPU device (fixtures/object_collectives_on_xla.py, the next test)."""
    call = OBJECT_COLLECTIVES[name]
    with pytest.raises(RuntimeError, match="got a tensor on cpu") as failure:
        world.run(with_process_group(lambda rank, device: call(rank)), size=2)
    assert "pytorch/xla#5492" in str(failure.value)


def test_native_torch_xla_refuses_the_object_collectives_too():
    """The reproduction without xlasim: exit 0 when torch_xla refuses the three calls without
    `device=` and runs `broadcast_object_list(device=torch_xla.device())`."""
    script = Path(__file__).resolve().parents[2] / "fixtures" / "object_collectives_on_xla.py"
    env = {k: v for k, v in os.environ.items() if not k.startswith("XLASIM")}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1")
    done = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "all_gather_object: refused: Expected XLA tensor" in done.stdout
