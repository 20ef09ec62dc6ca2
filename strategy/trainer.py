"""A small training loop on the strategy: fit by epochs or steps, validate, checkpoint, resume.

Resuming is exact: training k steps, saving, and resuming in a new launch for m more steps
gives the same parameters, bit for bit, as k + m steps straight. Everything a step depends on is
either in the checkpoint (parameters, optimizer state, the position in the epoch) or derived
from the seed: the sampler's order comes from (seed, epoch), so the batches already seen are
skipped, and each batch's random numbers come from (seed, global rank, epoch, batch), see
`_seed_batch`. Checkpoints are only taken at optimizer-step boundaries, where no gradient is half
accumulated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch_xla
import torch_xla.core.xla_model as xm
from torch.utils.data import DataLoader

from .module import TrainingModule
from .progress import Progress
from .sampling import set_epoch, with_distributed_sampler
from .strategy import XLAStrategy, strategy_for

CHECKPOINT_FORMAT = "strategy.trainer/1"
_TRAIN, _VALIDATE = 0, 1  # stages, for per-batch seeds


@dataclass
class FitResult:
    """What `fit` returns (from global rank 0)."""

    global_step: int
    epoch: int
    #: (global step, training loss averaged over the replicas), every `log_every_n_steps`.
    losses: list[tuple[int, float]] = field(default_factory=list)
    #: (epoch, validation loss averaged over the replicas), after every epoch.
    val_losses: list[tuple[int, float]] = field(default_factory=list)
    checkpoints: list[str] = field(default_factory=list)
    #: The trained parameters and buffers, on the CPU (global rank 0 only).
    state_dict: dict[str, torch.Tensor] = field(default_factory=dict)


@dataclass
class _Position:
    global_step: int = 0
    epoch: int = 0
    batches_done: int = 0  # batches of `epoch` already trained on


@dataclass
class _Fit:
    """Everything one rank's fit works on."""

    model: TrainingModule
    optimizer: torch.optim.Optimizer
    train: Any
    val: Any
    result: FitResult
    position: _Position = field(default_factory=_Position)
    progress: Progress | None = None
    step_loss: torch.Tensor | None = None  # summed over the micro-batches of the current step
    micro_batches: int = 0


class Trainer:
    """Trains a `TrainingModule` with an `XLAStrategy` on the selected devices.

    Args:
        devices: 1, every core of the host (e.g. 8), [i] or "auto" (see `parse_devices`).
        precision: "32-true", "bf16-true" or "bf16-mixed".
        max_epochs / max_steps: stop after this many epochs / optimizer steps (at least one).
        accumulate_grad_batches: batches per optimizer step.
        gradient_clip_val: clip the global gradient norm to this value.
        log_every_n_steps: how often the loss is averaged over replicas, recorded and printed.
        checkpoint_dir: where checkpoints go: `step-N.ckpt` every `checkpoint_every_n_steps`
            steps, and `last.ckpt` when fit ends.
        seed: seeds the samplers' shuffling and every batch's XLA random numbers.
        use_distributed_sampler: shard the loaders over the replicas (see `sampling`).
        progress: print progress on global rank 0.
        debug: print XLA metrics at teardown.
        strategy: use this strategy instead of one made from devices/precision/debug.
    """

    def __init__(
        self,
        *,
        devices: Any = "auto",
        precision: str = "32-true",
        max_epochs: int | None = None,
        max_steps: int | None = None,
        accumulate_grad_batches: int = 1,
        gradient_clip_val: float | None = None,
        log_every_n_steps: int = 1,
        checkpoint_dir: str | Path | None = None,
        checkpoint_every_n_steps: int | None = None,
        seed: int = 0,
        use_distributed_sampler: bool = True,
        progress: bool = True,
        debug: bool = False,
        sync_module_states: bool = True,
        strategy: XLAStrategy | None = None,
    ):
        if max_epochs is None and max_steps is None:
            raise ValueError("set max_epochs or max_steps: the trainer needs to know when to stop")
        for name, value in (
            ("max_epochs", max_epochs),
            ("max_steps", max_steps),
            ("accumulate_grad_batches", accumulate_grad_batches),
            ("log_every_n_steps", log_every_n_steps),
            ("checkpoint_every_n_steps", checkpoint_every_n_steps),
        ):
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive whole number, got {value!r}")
        if checkpoint_every_n_steps is not None and checkpoint_dir is None:
            raise ValueError("checkpoint_every_n_steps needs a checkpoint_dir to write to")
        self.strategy = strategy or strategy_for(
            devices, precision=precision, debug=debug, sync_module_states=sync_module_states
        )
        self.max_epochs = max_epochs
        self.max_steps = max_steps
        self.accumulate_grad_batches = accumulate_grad_batches
        self.gradient_clip_val = gradient_clip_val
        self.log_every_n_steps = log_every_n_steps
        self.checkpoint_dir = None if checkpoint_dir is None else Path(checkpoint_dir)
        self.checkpoint_every_n_steps = checkpoint_every_n_steps
        self.seed = seed
        self.use_distributed_sampler = use_distributed_sampler
        self.progress = progress
        self.model: TrainingModule | None = None

    # ------------------------------------------------------------------ entry points

    def fit(
        self,
        model: TrainingModule,
        train_dataloader: DataLoader,
        val_dataloader: DataLoader | None = None,
        ckpt_path: str | Path | None = None,
    ) -> FitResult | None:
        """Launch on the selected devices and train. `model` is not modified: every rank trains
        its own copy, and global rank 0's result (with the trained `state_dict`) comes back."""
        return self.strategy.launcher.launch(
            self.fit_here, model, train_dataloader, val_dataloader, ckpt_path
        )

    def fit_here(
        self,
        model: TrainingModule,
        train_dataloader: DataLoader,
        val_dataloader: DataLoader | None = None,
        ckpt_path: str | Path | None = None,
    ) -> FitResult:
        """Train `model` in place on the rank this runs on (inside a launch, a
        `@pytest.mark.xla` test or `xla_world.run`); each rank passes its own model object."""
        strategy = self.strategy
        strategy.setup_environment()
        self.model = model
        strategy.setup(self)
        fit = _Fit(
            model=model,
            optimizer=strategy.optimizers[0],
            train=self._loader(train_dataloader, evaluation=False),
            val=None if val_dataloader is None else self._loader(val_dataloader, evaluation=True),
            result=FitResult(global_step=0, epoch=0),
        )
        if ckpt_path is not None:
            self._restore(ckpt_path, fit)
        fit.progress = Progress(
            self._total_steps(fit.train), self.progress and strategy.is_global_zero
        )
        if ckpt_path is not None:
            fit.progress.message(f"resumed from {ckpt_path} at step {fit.position.global_step}")
        while not self._finished(fit.position):
            if not self._train_epoch(fit):
                break
            if fit.val is not None:
                loss = self._validate(fit.model, fit.val, fit.position.epoch)
                fit.result.val_losses.append((fit.position.epoch, loss))
                fit.progress.validation(fit.position.epoch, loss)
        if self.checkpoint_dir is not None:
            self._save(self.checkpoint_dir / "last.ckpt", fit)
        torch_xla.sync()
        fit.result.global_step, fit.result.epoch = fit.position.global_step, fit.position.epoch
        if strategy.is_global_zero:
            fit.result.state_dict = {k: v.detach().cpu() for k, v in model.state_dict().items()}
        strategy.teardown()
        return fit.result

    # ------------------------------------------------------------------ the loop

    def _loader(self, loader: DataLoader, evaluation: bool) -> Any:
        if self.use_distributed_sampler:
            loader = with_distributed_sampler(
                loader,
                **self.strategy.distributed_sampler_kwargs,
                seed=self.seed,
                evaluation=evaluation,
            )
        return self.strategy.process_dataloader(loader)

    def _total_steps(self, train: Any) -> int | None:
        """Steps the fit will reach, for the progress display (None if it cannot be known)."""
        try:
            per_epoch = math.ceil(len(train) / self.accumulate_grad_batches)
        except TypeError:  # an iterable dataset without a length
            return self.max_steps
        if self.max_epochs is None:
            return self.max_steps
        total = per_epoch * self.max_epochs
        return total if self.max_steps is None else min(total, self.max_steps)

    def _finished(self, position: _Position) -> bool:
        return (self.max_steps is not None and position.global_step >= self.max_steps) or (
            self.max_epochs is not None and position.epoch >= self.max_epochs
        )

    def _train_epoch(self, fit: _Fit) -> bool:
        """Train the rest of the current epoch; False if max_steps ended it early.

        An optimizer step follows every `accumulate_grad_batches` batches, and once more after
        the last batch of the epoch if some are left over (the loader's length is not needed,
        so iterable datasets work too).
        """
        precision, position = self.strategy.precision, fit.position
        set_epoch(fit.train, position.epoch)
        fit.model.train()
        for batch_idx, batch in enumerate(fit.train):
            if batch_idx < position.batches_done:
                continue  # seen before the checkpoint this run resumed from
            self._seed_batch(_TRAIN, position.epoch, batch_idx)
            with precision.forward_context():
                loss = fit.model.training_step(precision.convert_input(batch), batch_idx)
            (loss / self.accumulate_grad_batches).backward()
            fit.step_loss = (
                loss.detach() if fit.step_loss is None else fit.step_loss + loss.detach()
            )
            fit.micro_batches += 1
            position.batches_done = batch_idx + 1
            if fit.micro_batches == self.accumulate_grad_batches and self._step(fit):
                return False
        if fit.micro_batches and self._step(fit):
            return False
        position.epoch, position.batches_done = position.epoch + 1, 0
        return True

    def _step(self, fit: _Fit) -> bool:
        """One optimizer step on the accumulated gradients, then logging and checkpointing;
        True when max_steps is reached."""
        strategy, position = self.strategy, fit.position
        strategy.optimizer_step(fit.optimizer, self.gradient_clip_val)
        fit.optimizer.zero_grad(set_to_none=True)
        position.global_step += 1
        if position.global_step % self.log_every_n_steps == 0:
            mean = strategy.reduce(fit.step_loss / fit.micro_batches, reduce_op="mean").item()
            fit.result.losses.append((position.global_step, mean))
            fit.progress.step(position.epoch, position.global_step, mean)
        fit.step_loss, fit.micro_batches = None, 0
        every = self.checkpoint_every_n_steps
        if every and position.global_step % every == 0:
            self._save(self.checkpoint_dir / f"step-{position.global_step}.ckpt", fit)
        return self.max_steps is not None and position.global_step >= self.max_steps

    def _seed_batch(self, stage: int, epoch: int, batch_idx: int) -> None:
        """Seed this rank's XLA RNG for one batch from (seed, global rank, stage, epoch, batch).

        torch_xla advances a device's RNG state at every graph cut (`torch_xla.sync()`, which
        the device loader also calls for every batch). Without re-seeding, a batch's dropout
        masks would depend on how many syncs came before it: saving a checkpoint, logging, or
        resuming (which skips batches through the loader) would change the training.
        """
        entropy = [self.seed, self.strategy.global_rank, stage, epoch, batch_idx]
        state = int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0] >> 1)
        xm.set_rng_state(state, device=str(self.strategy.root_device))

    def _validate(self, model: TrainingModule, loader: Any, epoch: int) -> float:
        precision = self.strategy.precision
        model.eval()
        total, batches = None, 0
        with torch.no_grad():
            for batch_idx, batch in enumerate(loader):
                self._seed_batch(_VALIDATE, epoch, batch_idx)
                with precision.forward_context():
                    loss = model.validation_step(precision.convert_input(batch), batch_idx)
                total = loss.float() if total is None else total + loss.float()
                batches += 1
        model.train()
        if total is None:
            raise ValueError(
                f"the validation loader gave no batch on global rank {self.strategy.global_rank}"
            )
        return self.strategy.reduce(total / batches, reduce_op="mean").item()

    # ------------------------------------------------------------------ checkpoints

    def _save(self, path: Path, fit: _Fit) -> None:
        checkpoint = {
            "format": CHECKPOINT_FORMAT,
            "global_step": fit.position.global_step,
            "epoch": fit.position.epoch,
            "batches_done": fit.position.batches_done,
            "model": fit.model.state_dict(),
            "optimizer": fit.optimizer.state_dict(),
            "losses": list(fit.result.losses),
            "val_losses": list(fit.result.val_losses),
        }
        self.strategy.save_checkpoint(checkpoint, path)
        fit.result.checkpoints.append(str(path))

    def _restore(self, path: str | Path, fit: _Fit) -> None:
        checkpoint = self.strategy.load_checkpoint(path)
        if not isinstance(checkpoint, dict) or checkpoint.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(
                f"{path} is not a checkpoint written by strategy.Trainer (format "
                f"{checkpoint.get('format') if isinstance(checkpoint, dict) else None!r}, "
                f"expected {CHECKPOINT_FORMAT!r})"
            )
        fit.model.load_state_dict(checkpoint["model"])
        fit.optimizer.load_state_dict(checkpoint["optimizer"])
        fit.result.losses = list(checkpoint["losses"])
        fit.result.val_losses = list(checkpoint["val_losses"])
        fit.position = _Position(
            checkpoint["global_step"], checkpoint["epoch"], checkpoint["batches_done"]
        )
