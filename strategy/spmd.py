"""`SPMDStrategy`: FSDPv2 training, one SPMD program over every core of the host.

torch_xla's recommended way to train large models on TPUs is SPMD rather than one replica per
core: `xr.use_spmd()` makes the process see one virtual device, a `Mesh` names the real cores,
parameters are sharded along the mesh's `fsdp` axis by
`torch_xla.experimental.spmd_fully_sharded_data_parallel.SpmdFullyShardedDataParallel`
(FSDPv2), every batch is split along its first dimension over the same axis, and the XLA
compiler inserts the collectives. So the strategy runs in the calling process (no `xmp.spawn`:
a world of one process), and what `XLAStrategy` does with explicit collectives (averaging
gradients, broadcasting weights) is the compiler's job here.

The public API is `XLAStrategy`'s where it applies: `setup`, `model_to_device`,
`process_dataloader`, `optimizer_step`, `save_checkpoint` / `load_checkpoint`, precision, and
`reduce`/`broadcast`/`barrier` (identities in a world of one process). Checkpoints are
directories written by `torch.distributed.checkpoint` with torch_xla's `SPMDSavePlanner` /
`SPMDLoadPlanner`: each shard is written from its device, and loading re-shards onto whatever
mesh the loading strategy has, so a checkpoint moves between mesh shapes.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dist_cp
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.spmd as xs
import torch_xla.runtime as xr
from torch.distributed.checkpoint._nested_dict import flatten_state_dict, unflatten_state_dict
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
from torch.distributed.checkpoint.planner import SavePlan
from torch.utils._pytree import tree_map
from torch_xla.distributed.parallel_loader import MpDeviceLoader
from torch_xla.experimental.distributed_checkpoint import (
    SPMDLoadPlanner,
    SPMDSavePlanner,
    prime_optimizer,
)
from torch_xla.experimental.spmd_fully_sharded_data_parallel import (
    SpmdFullyShardedDataParallel,
)

from .checkpoint_io import CheckpointNotFoundError, check_storage_options
from .launching import InProcessLauncher
from .precision import Precision
from .strategy import XLAStrategy
from .tying import move_module

#: The mesh's axes: parameters and batches are sharded along "fsdp"; "model" (size 1 unless a
#: mesh_shape says otherwise) replicates them, leaving room for tensor parallelism.
MESH_AXES = ("fsdp", "model")


def batch_spec(tensor: torch.Tensor) -> tuple[str | None, ...]:
    """The partition spec of a batch tensor: its first dimension along "fsdp", the rest whole."""
    return (MESH_AXES[0],) + (None,) * (tensor.dim() - 1)


class BatchSharding:
    """An `input_sharding` for `MpDeviceLoader` that uploads every batch tensor of rank >= 2
    already split along its first dimension over the mesh's "fsdp" axis (torch_xla's
    `ShardingSpec` has one fixed rank and leaves tensors of any other rank replicated).

    Rank-1 tensors (labels) are uploaded whole and split by `ShardedDeviceLoader` once on the
    device: torch_xla 2.9.0 fails to upload a rank-1 tensor with a sharding over a 2-D mesh
    ("IndexError: too many indices for tensor of dimension 1" in `_xla_tensors_from_aten`),
    while `mark_sharding` on the uploaded tensor gives the same layout.
    """

    minibatch = False  # read by torch_xla's loader: the batch is global, not per host

    def __init__(self, mesh: xs.Mesh):
        self.mesh = mesh

    def xla_spec(self, tensor: torch.Tensor) -> Any:
        if tensor.dim() < 2:
            return None
        return xs.ShardingSpec(self.mesh, batch_spec(tensor)).xla_spec(tensor)


class ShardedDeviceLoader(MpDeviceLoader):
    """`MpDeviceLoader` whose batches are split along their first dimension over "fsdp": at
    upload (`BatchSharding`), and rank-1 tensors right after it."""

    def __init__(self, loader: Any, device: torch.device, mesh: xs.Mesh):
        super().__init__(loader, device, input_sharding=BatchSharding(mesh))
        self.mesh = mesh
        self.dataset = getattr(loader, "dataset", None)
        self.batch_sampler = getattr(loader, "batch_sampler", None)

    def __iter__(self) -> Iterator[Any]:
        for batch in super().__iter__():
            yield tree_map(self._split_vector, batch)

    def _split_vector(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor) and value.dim() == 1:
            xs.mark_sharding(value, self.mesh, batch_spec(value))
        return value


class ReplicaZeroSavePlanner(SPMDSavePlanner):
    """torch_xla's `SPMDSavePlanner`, writing each shard once.

    A tensor sharded along "fsdp" only is replicated along "model": with a model axis of size
    > 1, every piece of it lives on several devices. `SPMDSavePlanner` plans a write for every
    copy, and torch's global save plan (torch 2.9.0 with torch_xla 2.9.0) then drops every item
    of that tensor: the checkpoint silently holds none of its values (found by
    `test_a_sharded_checkpoint_restores_on_the_same_mesh_and_on_another`). This planner plans
    only replica 0 of each piece.
    """

    def create_local_plan(self) -> SavePlan:
        plan = super().create_local_plan()
        copies = set()
        for fqn, value in self.sharded_state_dict.items():
            if isinstance(value, xs.XLAShardedTensor):
                shards = torch_xla._XLAC._get_local_shard_replica_and_indices([value.global_tensor])
                copies |= {(fqn, i) for i, (replica, _) in enumerate(shards[0]) if replica != 0}
        items = [item for item in plan.items if (item.index.fqn, item.index.index) not in copies]
        return dataclasses.replace(plan, items=items)


def _shard_output(output: Any, mesh: xs.Mesh) -> None:
    """FSDPv2's instruction to the compiler: the forward's output (its first tensor, if a tuple)
    stays split along the batch, so weights are gathered rather than activations."""
    first = output[0] if isinstance(output, tuple) and output else output
    if isinstance(first, torch.Tensor) and first.dim() > 0:
        xs.mark_sharding(first, mesh, batch_spec(first))


class SPMDStrategy(XLAStrategy):
    """FSDPv2 over a mesh of every core the process sees (see the module docstring).

    Args:
        mesh_shape: (fsdp, model) sizes whose product is the number of cores; default
            (cores, 1). Parameters and batches are sharded along "fsdp" only.
        precision, debug: as for `XLAStrategy`.

    Checkpoints are `torch.distributed.checkpoint` directories, so there is no checkpoint_io;
    there is no sync_module_states either: one program holds the only copy of the weights.
    """

    def __init__(
        self,
        accelerator: Any = None,
        mesh_shape: tuple[int, int] | None = None,
        precision: str | Precision | None = None,
        debug: bool = False,
    ):
        # One process drives every core: the "world" of samplers and collectives is one.
        super().__init__(
            accelerator,
            parallel_devices=[torch.device("xla", 0)],
            precision=precision,
            debug=debug,
            sync_module_states=False,
        )
        self.mesh_shape = mesh_shape
        self.sharded_model: SpmdFullyShardedDataParallel | None = None
        self._mesh: xs.Mesh | None = None

    @property
    def launcher(self) -> InProcessLauncher:
        return InProcessLauncher(self)

    def setup_environment(self) -> None:
        """Turn SPMD on for this process (irreversible: torch_xla has no way back) and build
        the mesh."""
        if not xr.is_spmd():
            xr.use_spmd()
        super().setup_environment()
        self._mesh = make_mesh(self.mesh_shape)

    @property
    def mesh(self) -> xs.Mesh:
        self._require_launched("mesh")
        assert self._mesh is not None
        return self._mesh

    # ------------------------------------------------------------------ model and data

    def model_to_device(self) -> None:
        """Move the model (re-tying shared weights, in the precision's dtype), then wrap it in
        FSDPv2, which shards every parameter in place along "fsdp".

        `self.model` stays the unwrapped module, the one the trainer calls hooks on
        (`training_step` calls the module itself, not the wrapper); a forward hook gives that
        call the wrapper's output sharding, so both ways of calling it run FSDPv2.
        """
        if self.model is None:
            raise RuntimeError("model_to_device() needs a model: call setup(trainer) first")
        move_module(self.model, self.root_device, self.precision.param_dtype)
        mesh = self.mesh
        self.sharded_model = SpmdFullyShardedDataParallel(
            self.model, mesh=mesh, shard_output=lambda output, mesh: None
        )
        self.model.register_forward_hook(lambda module, args, output: _shard_output(output, mesh))

    def process_dataloader(self, dataloader: Any) -> Any:
        """`dataloader` in an `MpDeviceLoader` that uploads every batch split along its first
        dimension over the mesh's "fsdp" axis (once; idempotent)."""
        if isinstance(dataloader, MpDeviceLoader):
            return dataloader
        return ShardedDeviceLoader(dataloader, self.root_device, self.mesh)

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None
    ) -> None:
        """Clip the global gradient norm, then step. No gradient averaging: the gradients of
        one SPMD program already cover the whole global batch."""
        if gradient_clip_val is not None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
        optimizer.step()

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(
        self, checkpoint: dict[str, Any], filepath: str | Path, storage_options: Any = None
    ) -> None:
        """Write `checkpoint` as a `torch.distributed.checkpoint` directory at `filepath`
        (sharded tensors shard by shard, with `ReplicaZeroSavePlanner`), into a temporary sibling
        directory first, renamed into place once complete."""
        check_storage_options(storage_options)
        if not isinstance(checkpoint, dict):
            raise TypeError(f"a checkpoint is a dict of state, got {type(checkpoint).__name__}")
        torch_xla.sync()
        xm.wait_device_ops()  # the planner reads the shards: no execution may be in flight
        target = Path(filepath)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            dist_cp.save(
                state_dict=checkpoint,
                storage_writer=dist_cp.FileSystemWriter(str(partial)),
                planner=ReplicaZeroSavePlanner(),
                no_dist=_one_process(),
            )
            if target.exists():
                shutil.rmtree(target)
            os.replace(partial, target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)

    def load_checkpoint(self, filepath: str | Path, weights_only: bool = True) -> Any:
        """The checkpoint at `filepath` (a directory written by `save_checkpoint`).

        `torch.distributed.checkpoint` loads into existing tensors. Entries under "model" and
        "optimizer" that match this strategy's model and optimizer load straight into their
        live, sharded tensors, re-sharded to this strategy's mesh; every other tensor comes back
        on the CPU. An optimizer without state yet is primed first (torch_xla's
        `prime_optimizer`: one zero-gradient step), so that its state has tensors to load into;
        load the model afterwards, as `Trainer` does. `weights_only` is accepted for the
        `XLAStrategy` API; non-tensor entries are unpickled by `torch.distributed.checkpoint`.
        """
        del weights_only
        torch_xla.sync()
        xm.wait_device_ops()  # the planner writes into live tensors: nothing may be in flight
        reader = dist_cp.FileSystemReader(str(filepath))
        try:
            metadata = reader.read_metadata()
        except FileNotFoundError:
            raise CheckpointNotFoundError(f"checkpoint not found: {filepath}") from None
        nested_live = self._live_state(metadata.state_dict_metadata)
        flat_live, _ = flatten_state_dict(nested_live)
        live = {k: v for k, v in flat_live.items() if isinstance(v, torch.Tensor)}
        template: dict[str, Any] = {}
        for key, stored in metadata.state_dict_metadata.items():
            if not isinstance(stored, TensorStorageMetadata):
                template[key] = None  # replaced by the stored object
            elif key in live and tuple(live[key].shape) == tuple(stored.size):
                template[key] = live[key]
            else:
                template[key] = torch.empty(stored.size, dtype=stored.properties.dtype)
        dist_cp.load(
            state_dict=template,
            storage_reader=reader,
            planner=SPMDLoadPlanner(),
            no_dist=_one_process(),
        )
        return _keys_like(unflatten_state_dict(template, metadata.planner_data), nested_live)

    def _live_state(self, stored: dict[str, Any]) -> dict[str, Any]:
        """This strategy's model and optimizer state, as a checkpoint holds them."""
        live: dict[str, Any] = {}
        if self.model is not None:
            live["model"] = self.model.state_dict()
        if self.optimizers:
            optimizer = self.optimizers[0]
            if not optimizer.state and any(k.startswith("optimizer.state.") for k in stored):
                prime_optimizer(optimizer)
            live["optimizer"] = optimizer.state_dict()
        return live

    def remove_checkpoint(self, filepath: str | Path) -> None:
        """Delete the checkpoint directory if it exists."""
        shutil.rmtree(filepath, ignore_errors=True)

    def teardown(self) -> None:
        super().teardown()
        self.sharded_model = None


def _one_process() -> bool:
    """No process group: the checkpoint is this process's alone (say so, instead of letting
    `torch.distributed.checkpoint` warn that it assumes it)."""
    return not (dist.is_available() and dist.is_initialized())


def _keys_like(loaded: Any, like: Any) -> Any:
    """`loaded` with the keys of `like` where they print the same: checkpoint paths are strings,
    and an optimizer's state is keyed by int (loading "0" next to 0 would duplicate it)."""
    if not isinstance(loaded, dict) or not isinstance(like, Mapping):
        return loaded
    original = {str(key): key for key in like}
    restored = {}
    for key, value in loaded.items():
        key = original.get(key, key)
        restored[key] = _keys_like(value, like.get(key))
    return restored


def make_mesh(mesh_shape: tuple[int, ...] | None = None) -> xs.Mesh:
    """A ("fsdp", "model") mesh over every device of the SPMD process, in device order."""
    count = xr.global_runtime_device_count()
    shape = (count, 1) if mesh_shape is None else tuple(mesh_shape)
    if len(shape) != len(MESH_AXES) or int(np.prod(shape)) != count:
        raise ValueError(
            f"mesh_shape={mesh_shape!r} does not fit {count} devices: give (fsdp, model) sizes "
            f"whose product is {count}"
        )
    return xs.Mesh(np.arange(count), shape, MESH_AXES)
