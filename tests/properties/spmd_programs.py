"""What the SPMD properties draw, and what they run where SPMD is on (the SPMD worker of
`@pytest.mark.xla(spmd=True)`, or any process after `xr.use_spmd()`).

Drawing: meshes are (fsdp, model) factorizations of the device count, as `strategy.spmd` builds
them; sharding specs give each dimension one mesh axis or none (an axis at most once); models
are two-layer MLPs with widths from a small menu (every new shape is a new XLA compilation).

Checking where data lives: the expected content of every device's shard is derived here from the
mesh alone (device d sits at row d // model, column d % model of a mesh built in device order;
a dimension split k ways gives chunk i the rows [i * n / k, (i + 1) * n / k)), never read back from torch_xla's own shard indices.
"""

from __future__ import annotations

import math
import re

import numpy as np
import torch
import torch_xla
import torch_xla.distributed.spmd as xs
from hypothesis import strategies as st
from torch import nn

from strategy.module import TrainingModule

#: The mesh's axes as `strategy.spmd` documents them: mesh_shape is (fsdp, model). Written out
#: here, not imported, so that a strategy naming its axes otherwise fails the layout checks.
MESH_AXES = ("fsdp", "model")

#: Sizes divisible by every mesh axis of up to 8 devices: XLA pads uneven shards, and the
#: local data torch_xla reports for a padding-only shard is not a piece of the tensor.
WIDTHS = (8, 16)
BATCHES = (8, 16)


def mesh_shapes(devices: int) -> st.SearchStrategy[tuple[int, int]]:
    """(fsdp, model) sizes whose product is `devices`."""
    return st.sampled_from([(f, devices // f) for f in range(1, devices + 1) if devices % f == 0])


def partition_specs(ndim: int) -> st.SearchStrategy[tuple[str | None, ...]]:
    """A spec for a tensor of `ndim` dimensions: each dimension on one mesh axis or replicated,
    no axis twice."""
    choices = st.lists(st.sampled_from((None, *MESH_AXES)), min_size=ndim, max_size=ndim)
    return choices.filter(lambda spec: all(spec.count(a) <= 1 for a in MESH_AXES)).map(tuple)


class Mlp(TrainingModule):
    """Linear -> tanh -> Linear with a mean-squared-error loss and SGD with momentum (momentum
    is optimizer state a checkpoint must carry)."""

    def __init__(self, widths: tuple[int, int, int], lr: float = 0.1):
        super().__init__()
        self.inp = nn.Linear(widths[0], widths[1])
        self.out = nn.Linear(widths[1], widths[2])
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.inp(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def mlp(widths: tuple[int, int, int], seed: int) -> Mlp:
    """A freshly initialised MLP on the CPU, the same for the same seed."""
    torch.manual_seed(seed)
    return Mlp(widths)


# ------------------------------------------------------------------------------ where data lives


def device_index(shard: xs.XLAShard) -> int:
    """The global device index of a shard (`TPU:3`, `CPU:3` -> 3)."""
    return int(re.search(r"(\d+)$", shard.shard_device).group(1))


def expected_piece(
    full: torch.Tensor, spec: tuple[str | None, ...], mesh_shape: tuple[int, ...], device: int
) -> torch.Tensor:
    """The part of `full` that `device` holds when `full` is sharded by `spec` over a
    ("fsdp", "model") mesh of `mesh_shape` built from devices in order."""
    coordinates = np.unravel_index(device, mesh_shape)
    piece = full
    for dim, axis in enumerate(spec):
        if axis is None:
            continue
        chunk = full.shape[dim] // mesh_shape[MESH_AXES.index(axis)]
        piece = piece.narrow(dim, int(coordinates[MESH_AXES.index(axis)]) * chunk, chunk)
    return piece


def assert_layout(
    tensor: torch.Tensor, spec: tuple[str | None, ...], mesh_shape: tuple[int, ...], what: str
) -> None:
    """Every device holds exactly the piece of `tensor` that `spec` on the mesh gives it."""
    full = tensor.detach().cpu()
    shards = xs.XLAShardedTensor(tensor).local_shards
    assert len(shards) == math.prod(mesh_shape), f"{what}: {len(shards)} shards"
    for shard in shards:
        device = device_index(shard)
        want = expected_piece(full, spec, mesh_shape, device)
        got = shard.data.cpu()
        assert got.shape == want.shape and torch.equal(got, want), (
            f"{what} on device {device}: holds a {tuple(got.shape)} piece, expected "
            f"{tuple(want.shape)} of spec {spec} on mesh {mesh_shape}"
        )


def fsdp_spec(tensor: torch.Tensor) -> tuple[str | None, ...]:
    """FSDPv2's spec for a parameter: its largest dimension (the first of equals) along fsdp."""
    spec: list[str | None] = [None] * tensor.dim()
    if spec:
        spec[list(tensor.shape).index(max(tensor.shape))] = "fsdp"
    return tuple(spec)


def batch_layout(tensor: torch.Tensor) -> tuple[str | None, ...]:
    """Where a batch tensor belongs: its first dimension along fsdp, the rest whole (written out
    here, not taken from the strategy, so that a strategy splitting batches otherwise fails)."""
    return ("fsdp", *(None,) * (tensor.dim() - 1))


def sharding_text(tensor: torch.Tensor) -> str:
    return torch_xla._XLAC._get_xla_sharding_spec(tensor)
