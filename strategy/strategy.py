"""`XLAStrategy`: data-parallel training with one replica per XLA core; `SingleDeviceXLAStrategy`.

The strategy follows the XLAStrategy API Lightning documents, without depending on Lightning.
Rank facts (world size, global/local/node rank, root device) are asked of the torch_xla
runtime at every use once the strategy runs on a rank, never cached in shared state: emulated
ranks are threads of one process and share Python globals.

Collective discipline, against the deadlocks of Lightning #2700, #6230 and #14343: whenever
only global rank 0 may act (write, read or delete a file), it acts alone, and then every rank
runs the same broadcast of the outcome. All ranks therefore run the same collectives, and an
error raised on rank 0 is raised on every rank instead of leaving the others waiting.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch import nn
from torch.distributed import ReduceOp

from . import collectives
from .checkpoint_io import CheckpointError, XLACheckpointIO, check_storage_options
from .debug import metrics_report
from .devices import parse_devices
from .launching import InProcessLauncher, XLALauncher
from .precision import Precision, select_precision
from .sampling import to_device_loader
from .tying import move_module

T = TypeVar("T")


class XLAStrategy:
    """Data parallelism on every core of an XLA host (or slice), launched with `xmp.spawn`.

    Args:
        accelerator: unused; accepted for API compatibility (devices are XLA devices).
        parallel_devices: the devices of this host to run on (default: all of them).
        checkpoint_io: reads and writes checkpoint files (default `XLACheckpointIO`).
        precision: "32-true" (default), "bf16-true" or "bf16-mixed", or a `Precision`.
        debug: print a short XLA metrics report at teardown (global rank 0).
        sync_module_states: broadcast global rank 0's parameters and buffers after the move
            to the device, so every replica starts from the same weights.
    """

    def __init__(
        self,
        accelerator: Any = None,
        parallel_devices: list[torch.device] | None = None,
        checkpoint_io: XLACheckpointIO | None = None,
        precision: str | Precision | None = None,
        debug: bool = False,
        sync_module_states: bool = True,
    ):
        self.accelerator = accelerator
        self.parallel_devices = (
            parse_devices("auto") if parallel_devices is None else list(parallel_devices)
        )
        self.checkpoint_io = checkpoint_io or XLACheckpointIO()
        self.precision = select_precision(precision)
        self.debug = debug
        self.sync_module_states = sync_module_states
        self.model: nn.Module | None = None
        self.optimizers: list[torch.optim.Optimizer] = []
        self.metrics_report: str | None = None
        self._launched = False

    # ------------------------------------------------------------------ where this rank is

    @property
    def launcher(self) -> XLALauncher | InProcessLauncher:
        return XLALauncher(self)

    def _require_launched(self, what: str) -> None:
        if not self._launched:
            raise RuntimeError(
                f"{type(self).__name__}.{what} is only known on a rank: launch first (the "
                "strategy's launcher, xmp.spawn, a @pytest.mark.xla test) and call "
                "setup_environment() there. Touching an XLA device before xmp.spawn also "
                "stops xmp.spawn from starting on a TPU."
            )

    @property
    def root_device(self) -> torch.device:
        """This rank's XLA device."""
        self._require_launched("root_device")
        return torch_xla.device()

    @property
    def world_size(self) -> int:
        return xr.world_size() if self._launched else len(self.parallel_devices)

    @property
    def global_rank(self) -> int:
        return xr.global_ordinal() if self._launched else 0

    @property
    def local_rank(self) -> int:
        """The rank among the cores of this host (differs from global_rank on multi-host slices)."""
        return xr.local_ordinal() if self._launched else 0

    @property
    def node_rank(self) -> int:
        """Which host of the slice this rank runs on."""
        return xr.host_index() if self._launched else 0

    @property
    def is_global_zero(self) -> bool:
        return self.global_rank == 0

    @property
    def distributed_sampler_kwargs(self) -> dict[str, int]:
        """Sharding for a DistributedSampler: by global rank over the whole world."""
        return {"num_replicas": self.world_size, "rank": self.global_rank}

    def setup_environment(self) -> None:
        """Mark the strategy as running on a rank (call once on each rank, after the launch)."""
        self._launched = True

    # ------------------------------------------------------------------ model and data

    def setup(self, trainer: Any) -> None:
        """Move `trainer.model` to this rank's device and create its optimizer (after the move,
        so that the optimizer holds the device parameters)."""
        self.model = trainer.model
        self.model_to_device()
        self.optimizers = [self.model.configure_optimizers()]

    def model_to_device(self) -> None:
        """Move the model to the root device in the precision's dtype, re-tying shared weights,
        then (with sync_module_states) give every replica global rank 0's weights."""
        if self.model is None:
            raise RuntimeError("model_to_device() needs a model: call setup(trainer) first")
        move_module(self.model, self.root_device, self.precision.param_dtype)
        if self.sync_module_states and self.world_size > 1:
            xm.broadcast_master_param(self.model)

    def process_dataloader(self, dataloader: Any) -> Any:
        """Wrap `dataloader` in an `MpDeviceLoader` for this rank's device (once; idempotent)."""
        return to_device_loader(dataloader, self.root_device)

    def optimizer_step(
        self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None
    ) -> None:
        """Average gradients over the replicas, clip their global norm, then step."""
        xm.reduce_gradients(optimizer)
        if gradient_clip_val is not None:
            params = [p for group in optimizer.param_groups for p in group["params"]]
            torch.nn.utils.clip_grad_norm_(params, gradient_clip_val)
        optimizer.step()

    # ------------------------------------------------------------------ collectives

    def all_gather(
        self, tensor: torch.Tensor, group: Any = None, sync_grads: bool = False
    ) -> torch.Tensor:
        """Every replica's `tensor`, stacked: shape (world_size, *tensor.shape), on the input's
        device; differentiable with `sync_grads` (see `collectives.all_gather`)."""
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"all_gather needs a tensor, got {type(tensor).__name__}")
        self._check_group(group, "all_gather")
        if self.world_size == 1:
            stacked = tensor.unsqueeze(0)
            return stacked if sync_grads else stacked.detach()
        return collectives.all_gather(tensor, self.root_device, sync_grads)

    def barrier(self, name: str | None = None, *args: Any, **kwargs: Any) -> None:
        """Block until every replica reaches a barrier of the same name."""
        if self.world_size > 1:
            collectives.barrier(name or "strategy.barrier")

    def broadcast(self, obj: T, src: int = 0) -> T:
        """Global rank `src`'s `obj` on every rank: a tensor (same shape everywhere, returned on
        the input's device) or any picklable object (its pickled size may differ per rank)."""
        if not isinstance(src, int) or not 0 <= src < self.world_size:
            raise ValueError(
                f"broadcast(src={src!r}) on global rank {self.global_rank}: src must be a global "
                f"rank in 0..{self.world_size - 1}"
            )
        if self.world_size == 1:
            return obj
        if isinstance(obj, torch.Tensor):
            return collectives.broadcast_tensor(obj, src, self.root_device)
        return collectives.broadcast_object(obj, src, self.root_device)

    def reduce(self, output: T, group: Any = None, reduce_op: str | ReduceOp | None = "mean") -> T:
        """`output` reduced over the replicas ("mean"/"avg", "sum", "max", "min"), on the
        input's device; a non-tensor comes back unchanged."""
        if not isinstance(output, torch.Tensor):
            return output
        self._check_group(group, "reduce")
        if self.world_size == 1:
            _, mean = collectives.parse_reduce_op(reduce_op)  # still reject unknown ops
            if mean and not (output.is_floating_point() or output.is_complex()):
                return output.float()  # as on more replicas: a mean is not an integer
            return output
        return collectives.reduce(output, reduce_op, self.root_device)

    def _check_group(self, group: Any, what: str) -> None:
        if group is not None:
            raise ValueError(
                f"{what}(group={group!r}) on global rank {self.global_rank}: XLAStrategy "
                "communicates over all replicas; pass group=None"
            )

    def _on_global_zero(self, action: Callable[[], T]) -> T:
        """Run `action` on global rank 0 only, then give every rank its result, or raise its
        error on every rank. Every rank runs the same collective, whatever happens."""
        outcome: tuple[bool, Any] | None = None
        if self.is_global_zero:
            try:
                outcome = (True, action())
            except Exception as error:
                outcome = (False, _picklable(error))
        succeeded, value = self.broadcast(outcome, src=0)
        if not succeeded:
            raise value
        return value

    # ------------------------------------------------------------------ checkpoints

    def save_checkpoint(
        self, checkpoint: dict[str, Any], filepath: str | Path, storage_options: Any = None
    ) -> None:
        """Write `checkpoint` on global rank 0 only, atomically; every rank returns once the
        file is complete (or raises the same error)."""
        check_storage_options(storage_options)
        torch_xla.sync()  # on every rank: rank 0 alone must not run a graph with a collective
        self._on_global_zero(lambda: self.checkpoint_io.save_checkpoint(checkpoint, filepath))

    def load_checkpoint(self, filepath: str | Path, weights_only: bool = True) -> Any:
        """The checkpoint at `filepath`, with tensors on the CPU, on every rank.

        Global rank 0 reads the file and broadcasts its bytes: the ranks cannot disagree about
        whether there is a checkpoint (Lightning #14343), and hosts without the file (a local
        disk on a multi-host slice) still get it. A missing, truncated or corrupt file raises
        the same error on every rank. Load the result into the model and optimizer with their
        `load_state_dict`, which copy it onto the device.
        """
        torch_xla.sync()
        data = self._on_global_zero(lambda: self.checkpoint_io.read_bytes(filepath))
        return self.checkpoint_io.load_bytes(data, filepath, weights_only)

    def remove_checkpoint(self, filepath: str | Path) -> None:
        """Delete the checkpoint on global rank 0, the rank that writes it (Lightning #16843
        gated saving and removing on different ranks)."""
        self._on_global_zero(lambda: self.checkpoint_io.remove_checkpoint(filepath))

    # ------------------------------------------------------------------ end

    def teardown(self) -> None:
        """Release the model and optimizers; in debug mode, report XLA metrics on global rank 0."""
        if self.debug and self._launched:
            torch_xla.sync()
            if self.is_global_zero:
                self.metrics_report = metrics_report()
                print(self.metrics_report, flush=True)
        self.model = None
        self.optimizers = []


class SingleDeviceXLAStrategy(XLAStrategy):
    """Training on one XLA core (`devices=1` or `devices=[i]`) in the calling process."""

    def __init__(self, device: torch.device | str = "xla:0", **kwargs: Any):
        device = torch.device(device)
        if device.type != "xla":
            raise ValueError(f"SingleDeviceXLAStrategy needs an XLA device, got {device}")
        super().__init__(parallel_devices=[device], **kwargs)

    @property
    def launcher(self) -> InProcessLauncher:
        return InProcessLauncher(self)

    @property
    def root_device(self) -> torch.device:
        return self.parallel_devices[0]

    @property
    def world_size(self) -> int:
        return 1

    @property
    def global_rank(self) -> int:
        return 0

    @property
    def local_rank(self) -> int:
        return 0

    @property
    def node_rank(self) -> int:
        return 0


def strategy_for(devices: Any = "auto", **kwargs: Any) -> XLAStrategy:
    """The strategy for a `devices` argument: one core -> SingleDeviceXLAStrategy, all of them
    -> XLAStrategy."""
    selected = parse_devices(devices)
    if len(selected) == 1:
        return SingleDeviceXLAStrategy(selected[0], **kwargs)
    return XLAStrategy(parallel_devices=selected, **kwargs)


def _picklable(error: Exception) -> Exception:
    """`error`, noted as global rank 0's, if it survives pickling (to reach the other ranks);
    else a CheckpointError with its text."""
    error.add_note("(raised on global rank 0 and re-raised on every rank)")
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return CheckpointError(f"on global rank 0: {type(error).__name__}: {error}")
    return error
