"""The training loop on every core of the session: exact resumption, gradient reduction,
accumulation, clipping. The data grows with the world (32 samples per replica), so every world
size runs the same steps per epoch and the same expectations hold at 1, 4 or 8 cores."""

import functools
import pickle
import tempfile
from pathlib import Path

import pytest
import torch
import torch_xla.core.xla_model as xm
from hypothesis import example, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, Subset

import xlasim
from fixtures.data import Streamed, indexed_data, regression_data
from fixtures.models import NestedTiedModule, WeightSharingModule
from strategy import CheckpointNotFoundError, TrainingModule, XLAStrategy
from strategy.trainer import Trainer

# 32 samples per replica in batches of 8: 4 batches (steps) per epoch on each replica
# (the first 32 x world size samples of these 256: 8 replicas take them all).
DATA = regression_data(256, 16, 16, seed=1)
SAMPLES_PER_REPLICA = 32
VAL = regression_data(64, 16, 16, seed=2)


def _fit_on_rank(model_bytes, max_steps, data, val=None, ckpt_path=None, **trainer_kwargs):
    """Trainer.fit's per-rank body on the session's ranks, each with its own copy of one model
    (what a launch gives every rank)."""
    trainer = Trainer(strategy=XLAStrategy(), max_steps=max_steps, progress=False, **trainer_kwargs)
    val_loader = None if val is None else DataLoader(val, batch_size=8)
    return trainer.fit_here(pickle.loads(model_bytes), data(), val_loader, ckpt_path=ckpt_path)


def _shuffled_data(world_size: int = 8) -> DataLoader:
    """4 batches of 8 per replica in a world of `world_size` (on a rank: functools.partial)."""
    data = Subset(DATA, range(SAMPLES_PER_REPLICA * world_size))
    return DataLoader(data, batch_size=8, shuffle=True)


def _model_bytes(model_class=NestedTiedModule) -> bytes:
    torch.manual_seed(0)
    return pickle.dumps(model_class())


def _fit(xla_world, max_steps, checkpoint_dir=None, ckpt_path=None):
    """Global rank 0's FitResult of a fresh run on every rank."""
    return xla_world.run(
        _fit_on_rank,
        _model_bytes(),
        max_steps,
        functools.partial(_shuffled_data, xla_world.size),
        VAL,
        ckpt_path,
        checkpoint_dir=checkpoint_dir,
        seed=3,
    )[0]


@settings(max_examples=4, deadline=None, derandomize=True)
@given(k=st.integers(1, 6), m=st.integers(1, 5))
@example(k=4, m=3)  # saved at the end of epoch 0
@example(k=3, m=6)  # saved mid-epoch, resumed across two epoch ends (validation included)
def test_resume_is_bit_for_bit_the_same_as_training_straight(xla_world, k, m):
    """k + m steps straight == k steps, save, resume in a fresh run of every rank, m steps
    (with dropout, momentum, a mid-epoch stop and epoch boundaries)."""
    straight = _fit(xla_world, k + m)
    with tempfile.TemporaryDirectory() as directory:
        first = _fit(xla_world, k, checkpoint_dir=directory)
        assert first.checkpoints == [str(Path(directory) / "last.ckpt")]
        resumed = _fit(xla_world, k + m, ckpt_path=first.checkpoints[-1])

    assert resumed.global_step == straight.global_step == k + m
    assert resumed.state_dict.keys() == straight.state_dict.keys()
    for name, value in straight.state_dict.items():
        assert torch.equal(resumed.state_dict[name], value), f"{name} differs after resuming"
    assert resumed.losses == straight.losses
    assert resumed.val_losses == straight.val_losses


def test_resuming_from_a_missing_checkpoint_fails_on_every_rank_without_hanging(
    xla_world, tmp_path
):
    with pytest.raises(xlasim.RankFailedError, match="checkpoint not found") as raised:
        _fit(xla_world, 2, ckpt_path=tmp_path / "nope.ckpt")
    failures = raised.value.failures  # every rank raised the same error, none was left waiting
    assert sorted(failures) == list(range(xla_world.size))
    assert all(isinstance(error, CheckpointNotFoundError) for error in failures.values())


def test_fit_by_epochs_validates_and_checkpoints_every_k_steps(xla_world, tmp_path):
    result = xla_world.run(
        _fit_on_rank,
        _model_bytes(),
        None,
        functools.partial(_shuffled_data, xla_world.size),
        VAL,
        max_epochs=2,
        checkpoint_dir=tmp_path,
        checkpoint_every_n_steps=3,
    )[0]
    assert (result.global_step, result.epoch) == (8, 2)
    assert [epoch for epoch, _ in result.val_losses] == [1, 2]
    assert [step for step, _ in result.losses] == list(range(1, 9))
    names = ["step-3.ckpt", "step-6.ckpt", "last.ckpt"]
    assert result.checkpoints == [str(tmp_path / name) for name in names]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)


class SampleRecorder(TrainingModule):
    """Records which samples each batch held; a one-parameter loss so that it can train."""

    def __init__(self):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.zeros(()))
        self.seen: list[int] = []

    def training_step(self, batch, batch_idx):
        (indices,) = batch
        self.seen.extend(indices.cpu().tolist())
        return (self.weight * indices.float()).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _samples_seen_per_epoch(samples: int) -> list[list[int]]:
    """The samples this replica saw in each of 2 epochs (8 per replica per epoch)."""
    model = SampleRecorder()
    trainer = Trainer(strategy=XLAStrategy(), max_epochs=2, progress=False, seed=11)
    trainer.fit_here(model, DataLoader(indexed_data(samples), batch_size=4, shuffle=True))
    return [model.seen[:8], model.seen[8:]]


def test_each_replica_trains_on_its_own_shard_reshuffled_every_epoch(xla_world):
    n = xla_world.size
    per_rank = xla_world.run(_samples_seen_per_epoch, 8 * n)
    for epoch in (0, 1):
        shards = [epochs[epoch] for epochs in per_rank]
        assert sorted(i for shard in shards for i in shard) == list(range(8 * n))
    for rank, (first, second) in enumerate(per_rank):
        assert first != second, f"rank {rank} saw epoch 1 in epoch 0's order: no set_epoch"
        assert first != list(range(rank, 8 * n, n)), f"rank {rank}: shuffle=True was dropped"


def _train_tied_model(steps: int, world_size: int) -> int:
    trainer = Trainer(strategy=XLAStrategy(), max_steps=steps, progress=False)
    return trainer.fit_here(NestedTiedModule(), _shuffled_data(world_size)).global_step


def test_training_steps_do_not_recompile(xla_world, xla_metrics):
    """Per-batch seeds, logging and the loop itself keep every step's graph the same. (Steps 1
    to 3 each compile: no optimizer state yet, then fresh state, then donated buffers.)"""
    n = xla_world.size
    assert xla_world.run(_train_tied_model, 3, n) == [3] * n  # warm-up compiles
    xla_metrics.reset()
    assert xla_world.run(_train_tied_model, 7, n) == [7] * n  # crosses an epoch end (4 steps)
    xla_metrics.check(compilations=0)


def _train_one_step(grad_scale, clip=None):
    strategy = XLAStrategy()
    strategy.setup_environment()
    rank = strategy.global_rank
    param = torch.nn.Parameter(torch.zeros(2, device=strategy.root_device))
    optimizer = torch.optim.SGD([param], lr=1.0)
    param.grad = torch.tensor(grad_scale, device=strategy.root_device) * (rank + 1)
    strategy.optimizer_step(optimizer, gradient_clip_val=clip)
    return param.detach().cpu()


@pytest.mark.xla(min_devices=2)
def test_optimizer_step_averages_gradients_over_replicas(xla_rank):
    # gradients (rank + 1) * [1, -2]: their mean over n ranks is (n + 1) / 2 * [1, -2]
    mean = (xla_rank.world_size + 1) / 2
    assert _train_one_step([1.0, -2.0]).tolist() == [-mean, 2 * mean]


@pytest.mark.xla
def test_gradient_clipping_applies_to_the_averaged_gradient(xla_rank):
    # mean gradient (n + 1) / 2 * [3, 4] has norm >= 5; clipped to norm 1: [0.6, 0.8]
    torch.testing.assert_close(_train_one_step([3.0, 4.0], clip=1.0), torch.tensor([-0.6, -0.8]))


def _regression_batches(batch_size: int, streamed: int = 0):
    """256 samples in a DataLoader; `streamed` samples of an iterable dataset instead if given."""
    data = regression_data(streamed or 256, 32, 10, seed=4)
    return DataLoader(Streamed(data) if streamed else data, batch_size=batch_size)


def test_accumulating_two_half_batches_matches_one_full_batch(xla_world):
    model = _model_bytes(WeightSharingModule)
    full, accumulated = (
        xla_world.run(
            _fit_on_rank,
            model,
            3,
            functools.partial(_regression_batches, batch_size),
            accumulate_grad_batches=accumulate,
        )[0].state_dict
        for batch_size, accumulate in ((8, 1), (4, 2))
    )
    initial = pickle.loads(model).state_dict()
    for name, value in full.items():
        assert not torch.equal(value, initial[name])  # it trained
        torch.testing.assert_close(accumulated[name], value, rtol=1e-5, atol=1e-6)


def test_iterable_data_with_a_partial_accumulation_at_each_epoch_end(xla_world):
    # 12 streamed samples per replica (n // 2 more are dropped so all replicas match: 100 on
    # 8 cores), 3 batches of 4, so each epoch is one step of 2 batches and one step of the
    # leftover batch
    n = xla_world.size
    result = xla_world.run(
        _fit_on_rank,
        _model_bytes(WeightSharingModule),
        None,
        functools.partial(_regression_batches, 4, streamed=12 * n + n // 2),
        max_epochs=2,
        accumulate_grad_batches=2,
    )[0]
    assert (result.global_step, result.epoch) == (4, 2)
    assert [step for step, _ in result.losses] == [1, 2, 3, 4]


def test_fit_launches_on_every_core_and_leaves_the_callers_model_alone(emulation_only, xla_world):
    model = pickle.loads(_model_bytes())
    result = Trainer(max_steps=2, progress=False).fit(model, _shuffled_data())
    assert result.global_step == 2
    assert model.stem.weight.device == torch.device("cpu")
    assert not torch.equal(result.state_dict["stem.weight"], model.stem.weight)


def test_single_device_fit_trains_on_the_chosen_core(emulation_only, xla_world):
    model = pickle.loads(_model_bytes(WeightSharingModule))
    last_core = len(xm.get_xla_supported_devices()) - 1  # of the launching host
    result = Trainer(devices=[last_core], max_steps=2, progress=False).fit(
        model, _regression_batches(8)
    )
    assert result.global_step == 2
    assert model.layer_1.weight.device == torch.device("cpu")  # the caller's model is untouched
    assert not torch.equal(result.state_dict["layer_1.weight"], model.layer_1.weight)


@pytest.mark.xla
def test_debug_teardown_reports_compilations_and_cpu_fallbacks(xla_rank):
    strategy = XLAStrategy(debug=True)
    strategy.setup_environment()
    (torch.ones(3, device=xla_rank.device) * 2).sum().item()  # .item() falls back to the CPU
    strategy.teardown()
    if xla_rank.rank == 0:
        assert "compilations:" in strategy.metrics_report
        assert "_local_scalar_dense x" in strategy.metrics_report
    else:
        assert strategy.metrics_report is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "set max_epochs or max_steps"),
        ({"max_steps": 0}, "max_steps must be a positive whole number"),
        ({"max_epochs": 1, "accumulate_grad_batches": 1.5}, "accumulate_grad_batches must"),
        ({"max_steps": 1, "checkpoint_every_n_steps": 2}, "needs a checkpoint_dir"),
    ],
)
def test_trainer_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Trainer(strategy=XLAStrategy(), **kwargs)
