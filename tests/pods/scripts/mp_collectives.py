"""torch_xla's cross-replica collectives as a pod's hosts call them, one launch per family: the
families torch_xla's seven `test_mp_*` scripts exercise (all_gather, all_to_all,
collective_permute, mesh_reduce, reduce_scatter, replication's all_reduce, and collective
matmul's all_gather/reduce_scatter over one explicit group), written here from what each
collective computes.

Every rank checks its own results against what it expects (each rank's input is drawn from a
generator seeded by its rank, so every rank can compute every other's) and raises naming the
collective when one is wrong; then it prints a digest of each result, `rank R: FAMILY/NAME
DIGEST`, so a pod's output can be compared with one machine's bit for bit.

    python mp_collectives.py            every family (under `xlasim run` or on a TPU VM)
"""

import hashlib
import os

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr


def _digest(value) -> str:
    if isinstance(value, torch.Tensor):
        raw = value.cpu().contiguous().view(torch.uint8).numpy().tobytes()
    else:
        raw = repr(value).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


def _say(line: str) -> None:
    """One line in one write: the ranks of a machine share its stdout."""
    os.write(1, f"{line}\n".encode())


def _input(rank: int, *shape: int) -> torch.Tensor:
    """Rank `rank`'s random input, which every rank can draw."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(7000 + rank))


def _check(family: str, name: str, got, expected, exact: bool = True) -> None:
    """Raise naming the collective unless `got` is `expected` (bit for bit, or within float32
    rounding where two collectives may sum in different orders on a TPU); print its digest."""
    rank = xr.global_ordinal()
    same = (
        got == expected
        if not isinstance(got, torch.Tensor)
        else (
            torch.equal(got.cpu(), expected)
            if exact
            else torch.allclose(got.cpu(), expected, rtol=1e-5, atol=1e-5)
        )
    )
    if not same:
        raise AssertionError(f"rank {rank}: {family}/{name}: got {got}, expected {expected}")
    _say(f"rank {rank}: {family}/{name} {_digest(got)}")


def _sum_of_inputs(size: int, *shape: int) -> torch.Tensor:
    return torch.stack([_input(r, *shape).double() for r in range(size)]).sum(0).float()


def all_gather(index: int) -> None:
    device, rank, size = torch_xla.device(), xr.global_ordinal(), xr.world_size()
    ordinal = torch.tensor([rank], dtype=torch.float32, device=device)
    _check("all_gather", "ordinals", xm.all_gather(ordinal, dim=0), torch.arange(size).float())
    parity = [list(range(0, size, 2)), list(range(1, size, 2))]
    mine = parity[rank % 2]
    _check(
        "all_gather",
        "parity_groups",
        xm.all_gather(ordinal, dim=0, groups=parity),
        torch.tensor(mine, dtype=torch.float32),
    )
    pieces = [torch.full((2, 3), float(rank * 10 + i), device=device) for i in range(3)]
    expected = [
        torch.cat([torch.full((2, 3), float(r * 10 + i)) for r in range(size)]) for i in range(3)
    ]
    for i, got in enumerate(xm.all_gather(pieces, dim=0, pin_layout=False)):
        _check("all_gather", f"list_{i}", got, expected[i])
    outputs = [torch.zeros(2 * size, 3, device=device) for _ in range(3)]
    xm.all_gather(pieces, dim=0, output=outputs, pin_layout=False)
    for i, got in enumerate(outputs):
        _check("all_gather", f"list_into_output_{i}", got, expected[i])
    for i, got in enumerate(xm.all_gather_bucketized(pieces, dim=0, pin_layout=False)):
        _check("all_gather", f"bucketized_{i}", got, expected[i])
    compiled = torch.compile(lambda t: xm.all_gather(t, dim=0), backend="openxla", fullgraph=True)
    _check("all_gather", "compiled", compiled(ordinal), torch.arange(size).float())


def all_to_all(index: int) -> None:
    device, rank, size = torch_xla.device(), xr.global_ordinal(), xr.world_size()
    slots = 3
    value = torch.tensor([rank * 100 + s for s in range(slots * size)], dtype=torch.int32)
    got = xm.all_to_all(value.to(device), split_dimension=0, concat_dimension=0, split_count=size)
    # Chunk r of the result is rank r's chunk `rank`.
    expected = torch.cat(
        [
            torch.tensor([r * 100 + s for s in range(slots * size)], dtype=torch.int32)[
                rank * slots : (rank + 1) * slots
            ]
            for r in range(size)
        ]
    )
    _check("all_to_all", "chunks", got, expected)


def collective_permute(index: int) -> None:
    device, rank, size = torch_xla.device(), xr.global_ordinal(), xr.world_size()
    value = _input(rank, 50)
    forward = [[r, (r + 1) % size] for r in range(size)]
    _check(
        "collective_permute",
        "ring",
        xm.collective_permute(value.to(device), forward),
        _input((rank - 1) % size, 50),
    )
    backward = [[r, (r - 1) % size] for r in range(size)]
    _check(
        "collective_permute",
        "ring_backward",
        xm.collective_permute(value.to(device), backward),
        _input((rank + 1) % size, 50),
    )


def mesh_reduce(index: int) -> None:
    rank, size = xr.global_ordinal(), xr.world_size()
    _check("mesh_reduce", "scalar", xm.mesh_reduce("scalar", 0.5 + rank, sum), size * size / 2)
    tensor = _input(rank, 3, 2)
    got = xm.mesh_reduce("tensor", tensor, lambda values: torch.stack(values).sum(0))
    _check("mesh_reduce", "tensor", got, _sum_of_inputs(size, 3, 2), exact=False)


def reduce_scatter(index: int) -> None:
    device, rank, size = torch_xla.device(), xr.global_ordinal(), xr.world_size()
    scale, shard = 1.0 / size, 2
    whole = _input(rank, 4, shard * size, 3).to(device)
    world = xm.all_reduce(xm.REDUCE_SUM, whole, scale).cpu()
    mine = world[:, rank * shard : (rank + 1) * shard]
    one = xm.reduce_scatter(xm.REDUCE_SUM, whole, scale, 1, size)
    _check("reduce_scatter", "one", one, mine, exact=False)
    _check(
        "reduce_scatter",
        "matches_the_sum",
        mine,
        (_sum_of_inputs(size, 4, shard * size, 3) * scale)[:, rank * shard : (rank + 1) * shard],
        exact=False,
    )
    xm.rendezvous("reduce_scatter one")
    pieces = [(whole * (i + 1)) for i in range(3)]
    expected = [
        xm.all_reduce(xm.REDUCE_SUM, p, scale).cpu()[:, rank * shard : (rank + 1) * shard]
        for p in pieces
    ]
    got = xm.reduce_scatter(xm.REDUCE_SUM, pieces, scale, 1, size, pin_layout=False)
    for i, each in enumerate(got):
        _check("reduce_scatter", f"list_{i}", each, expected[i], exact=False)
    got = xm.reduce_scatter_bucketized(xm.REDUCE_SUM, pieces, scale, 1, size, pin_layout=False)
    for i, each in enumerate(got):
        _check("reduce_scatter", f"bucketized_{i}", each, expected[i], exact=False)
    outputs = [torch.zeros(4, shard, 3, device=device) for _ in pieces]
    xm.reduce_scatter(xm.REDUCE_SUM, pieces, scale, 1, size, output=outputs, pin_layout=False)
    for i, each in enumerate(outputs):
        _check("reduce_scatter", f"list_into_output_{i}", each, expected[i], exact=False)
    xm.rendezvous("reduce_scatter lists")


def replication(index: int) -> None:
    device, size = torch_xla.device(), xr.world_size()
    ones = torch.ones(2, 3)
    in_place = [ones.to(device), (ones * 2).to(device)]
    xm.all_reduce(xm.REDUCE_SUM, in_place)
    _check("replication", "in_place_0", in_place[0], ones * size)
    _check("replication", "in_place_1", in_place[1], ones * 2 * size)
    three = xm.all_reduce(xm.REDUCE_SUM, (ones * 3).to(device))
    _check("replication", "returned", three, ones * 3 * size)
    _check(
        "replication",
        "scaled",
        xm.all_reduce(xm.REDUCE_SUM, (ones * 4).to(device), scale=0.5),
        ones * 4 * size * 0.5,
    )
    compiled = torch.compile(
        lambda t: xm.all_reduce(xm.REDUCE_SUM, t), backend="openxla", fullgraph=True
    )
    _check("replication", "compiled", compiled((ones * 5).to(device)), ones * 5 * size)


def collective_matmul(index: int) -> None:
    """What torch_xla's collective matmul test asks of a TPU: all_gather and reduce_scatter over
    one explicit group of every rank, with a channel id and global device ids."""
    device, rank, size = torch_xla.device(), xr.global_ordinal(), xr.world_size()
    everyone = [list(range(size))]
    ordinal = torch.tensor([rank], dtype=torch.float32, device=device)
    gathered = xm.all_gather(
        ordinal, dim=0, groups=everyone, channel_id=1, use_global_device_ids=True
    )
    _check("collective_matmul", "all_gather", gathered, torch.arange(size).float())
    scale, shard = 1.0 / size, 2
    whole = _input(rank, 8, shard * size, 8).to(device)
    got = xm.reduce_scatter(
        xm.REDUCE_SUM,
        whole,
        scale,
        1,
        size,
        groups=everyone,
        channel_id=1,
        use_global_device_ids=True,
    )
    world = xm.all_reduce(xm.REDUCE_SUM, whole, scale).cpu()
    mine = world[:, rank * shard : (rank + 1) * shard]
    _check("collective_matmul", "reduce_scatter", got, mine, exact=False)


FAMILIES = [
    all_gather,
    all_to_all,
    collective_permute,
    mesh_reduce,
    reduce_scatter,
    replication,
    collective_matmul,
]

if __name__ == "__main__":
    for family in FAMILIES:
        torch_xla.launch(family, args=())
