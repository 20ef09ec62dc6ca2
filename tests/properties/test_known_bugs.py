"""One regression test per entry of docs/known-bugs.md that applies to an
XLA training strategy, named after the bug. Each is the property behind the bug, on real ranks.
Bug 12 (tests that could not fail) is guarded by the mutation run, tests/mutation/, and its
own check that every mutant still applies (tests/mutation/test_mutants.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, TensorDataset
from torch_xla.distributed.parallel_loader import MpDeviceLoader

from strategy import CheckpointNotFoundError, XLACheckpointIO, XLAStrategy
from strategy.module import TrainingModule
from strategy.sampling import set_epoch, with_distributed_sampler
from strategy.trainer import Trainer

ROOT = Path(__file__).resolve().parents[2]
MULTIHOST_PROGRAM = Path(__file__).with_name("multihost_program.py")


def launched(**kwargs) -> XLAStrategy:
    strategy = XLAStrategy(**kwargs)
    strategy.setup_environment()
    return strategy


class RecordingIO(XLACheckpointIO):
    """Leaves a marker naming the global rank that wrote."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        super().save_checkpoint(checkpoint, path, storage_options)
        Path(path).with_name(f"written-by-{xr.global_ordinal()}").touch()


class WeightSharing(TrainingModule):
    """The Lightning TPU guide's example: layer_3 shares layer_1's weight."""

    def __init__(self):
        super().__init__()
        self.layer_1 = nn.Linear(8, 4, bias=False)
        self.layer_2 = nn.Linear(4, 8, bias=False)
        self.layer_3 = nn.Linear(8, 4, bias=False)
        self.layer_3.weight = self.layer_1.weight

    def forward(self, x):
        return self.layer_3(self.layer_2(self.layer_1(x)))

    def training_step(self, batch, batch_idx):
        return self(batch[0].float()).pow(2).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


# ------------------------------------------------------------------------------ 1


@pytest.mark.xla
def test_bug01_weights_untied_by_move_to_device(xla_rank):
    model = WeightSharing()
    before = len(list(model.parameters()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # re-tied: no "parameter count changed" warning
        launched().setup(SimpleNamespace(model=model))
    assert model.layer_3.weight is model.layer_1.weight
    assert model.layer_1.weight.device == xla_rank.device
    assert len(list(model.parameters())) == before


# ------------------------------------------------------------------------------ 2, 3, 4


@pytest.mark.xla
@pytest.mark.xla_timeout(120)
def test_bug02_checkpoint_save_runs_the_same_collectives_on_every_rank(xla_rank, tmp_path):
    strategy = launched(checkpoint_io=RecordingIO())
    pending = xm.all_reduce(xm.REDUCE_SUM, torch.ones(3, device=xla_rank.device)) * 2
    strategy.save_checkpoint({"pending": pending}, tmp_path / "c.ckpt")
    # every rank is back in step: the next collective matches on all of them
    after = xm.all_reduce(xm.REDUCE_SUM, torch.ones(1, device=xla_rank.device))
    assert after.item() == xla_rank.world_size
    assert sorted(p.name for p in tmp_path.glob("written-by-*")) == ["written-by-0"]
    loaded = strategy.load_checkpoint(tmp_path / "c.ckpt")
    assert loaded["pending"].tolist() == [2.0 * xla_rank.world_size] * 3


@pytest.mark.xla
def test_bug03_saving_a_module_with_pending_device_graphs(xla_rank, tmp_path):
    strategy = launched()
    model = WeightSharing()
    strategy.setup(SimpleNamespace(model=model))
    optimizer = strategy.optimizers[0]
    model.training_step((torch.ones(2, 8, device=xla_rank.device),), 0).backward()
    strategy.optimizer_step(optimizer)  # the new weights are a pending graph

    strategy.save_checkpoint({"model": model}, tmp_path / "m.ckpt")
    loaded = strategy.load_checkpoint(tmp_path / "m.ckpt", weights_only=False)["model"]

    assert loaded.layer_1.weight.device == torch.device("cpu")
    assert loaded.layer_3.weight is loaded.layer_1.weight
    for name, value in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], value.cpu()), name


@pytest.mark.xla
def test_bug04_a_tensor_and_its_views_saved_together_from_the_device(xla_rank, tmp_path):
    strategy = launched()
    base = torch.arange(12.0, device=xla_rank.device).reshape(3, 4)
    state = {
        "base": base,
        "row": base[1],
        "narrow": base[:, 1:3],
        "t": base.t(),
        "flat": base.view(-1),
    }
    strategy.save_checkpoint(state, tmp_path / "v.ckpt")
    loaded = strategy.load_checkpoint(tmp_path / "v.ckpt")
    expected = torch.arange(12.0).reshape(3, 4)
    assert torch.equal(loaded["base"], expected)
    assert torch.equal(loaded["row"], expected[1])
    assert torch.equal(loaded["narrow"], expected[:, 1:3])
    assert torch.equal(loaded["t"], expected.t())
    assert torch.equal(loaded["flat"], expected.view(-1))


# ------------------------------------------------------------------------------ 5, 6


@pytest.mark.xla
def test_bug05_broadcast_ignored_src_for_objects_of_rank_dependent_size(xla_rank):
    strategy = launched()
    last = xla_rank.world_size - 1

    def mine(rank: int) -> dict:
        return {"rank": rank, "payload": "x" * (100 * rank), "list": list(range(rank))}

    for src in {0, last}:
        assert strategy.broadcast(mine(xla_rank.rank), src=src) == mine(src)


@pytest.mark.xla
def test_bug06_collectives_return_results_on_the_input_device(xla_rank):
    strategy = launched()
    for device in (xla_rank.device, torch.device("cpu")):
        tensor = torch.full((2,), float(xla_rank.rank), device=device)
        assert strategy.reduce(tensor, reduce_op="sum").device == device
        assert strategy.reduce(tensor, reduce_op="mean").device == device
        assert strategy.all_gather(tensor).device == device
        assert strategy.broadcast(tensor, src=0).device == device


# ------------------------------------------------------------------------------ 7, 9: a multi-host slice


@pytest.fixture(scope="module")
def multihost_records(tmp_path_factory) -> tuple[dict, list[dict], Path]:
    """Runs multihost_program.py on an emulated slice of 2 hosts x 1 process x 2 cores (global
    ranks 0..3, local ranks 0, 1, 0, 1): the launch result, each rank's record, the output dir.

    A multi-host slice needs worker processes per host, which xlasim's `run` command sets up
    (on a TPU VM too: it emulates on the CPU in a subprocess)."""
    out = tmp_path_factory.mktemp("multihost")
    env = {**os.environ, "PJRT_DEVICE": "CPU", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "xlasim", "run", "--devices", "4", "--processes", "2"]
    command += ["--hosts", "2", str(MULTIHOST_PROGRAM), str(out)]
    # Run where host 0's relative checkpoint may land (host 0 works in the launch directory).
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}"
    result = json.loads(done.stdout.strip().splitlines()[-1])["launch_result"]
    records = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(4)]
    return result, records, out


def test_bug07_local_and_global_rank_confused_on_multi_host_slices(multihost_records):
    result, records, out = multihost_records
    assert [r["local_rank"] for r in records] == [0, 1, 0, 1]  # the premise
    assert [r["global_rank"] for r in records] == [0, 1, 2, 3]
    assert [r["node_rank"] for r in records] == [0, 0, 1, 1]
    assert [r["is_global_zero"] for r in records] == [True, False, False, False]
    for rank, record in enumerate(records):
        assert record["sampler_kwargs"] == {"num_replicas": 4, "rank": rank}
    shards = [record["shard"] for record in records]
    assert sorted(i for shard in shards for i in shard) == list(range(16)), shards
    # saving and removing happen on one rank, the same one, and every rank saw its outcome
    assert sorted(p.name for p in (out / "shared").iterdir()) == ["removed-by-0", "written-by-0"]
    assert all(r["loaded_shared"] == 0 and not r["shared_exists_after_remove"] for r in records)
    assert result == records[0]  # the launcher returned global rank 0's result


def test_bug09_ranks_agree_on_loading_a_checkpoint_only_one_host_sees(multihost_records):
    _, records, _ = multihost_records
    assert [r["host_sees_local_checkpoint"] for r in records] == [True, True, False, False]
    assert [r["loaded_local"] for r in records] == [0, 0, 0, 0]


def load_missing_on_rank(path: str) -> str:
    try:
        launched().load_checkpoint(path)
    except CheckpointNotFoundError as error:
        return type(error).__name__
    return "loaded"


def test_bug09_a_missing_checkpoint_fails_alike_on_every_rank(xla_world, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("missing") / "nope.ckpt")
    assert xla_world.run(load_missing_on_rank, path) == ["CheckpointNotFoundError"] * xla_world.size


# ------------------------------------------------------------------------------ 8


@pytest.mark.xla
def test_bug08_dataloader_wrapped_twice_lost_its_batch_sampler(xla_rank):
    strategy = launched()
    dataset = TensorDataset(torch.arange(32))
    loader = with_distributed_sampler(
        DataLoader(dataset, batch_size=2), **strategy.distributed_sampler_kwargs
    )

    wrapped = strategy.process_dataloader(loader)
    again = strategy.process_dataloader(wrapped)

    assert again is wrapped
    assert isinstance(wrapped, MpDeviceLoader)
    assert isinstance(wrapped.batch_sampler, BatchSampler)
    assert wrapped.batch_sampler is loader.batch_sampler
    set_epoch(again, 1)
    samples = [i for (batch,) in again for i in batch.cpu().tolist()]
    assert samples == list(range(xla_rank.rank, 32, xla_rank.world_size))


# ------------------------------------------------------------------------------ 10


def _report_rank() -> int:
    if xr.global_ordinal() != 0:
        time.sleep(0.2)  # finish last: if other ranks wrote results too, theirs would win
    return xr.global_ordinal()


def test_bug10_launch_results_written_by_one_rank_only(xla_world, emulated, monkeypatch, tmp_path):
    if not emulated:
        pytest.skip("the launcher spawns the world from this process; natively the workers own it")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert XLAStrategy().launcher.launch(_report_rank) == 0
    assert list(tmp_path.iterdir()) == []  # the launch's result directory is gone


# ------------------------------------------------------------------------------ 11


class Recorder(TrainingModule):
    """Remembers the samples it trained on."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(1))
        self.seen: list[int] = []

    def training_step(self, batch, batch_idx):
        (indices,) = batch
        self.seen += indices.cpu().tolist()
        return (self.weight * indices.float()).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def train_and_report_samples() -> list[int]:
    model = Recorder()
    loader = DataLoader(TensorDataset(torch.arange(64)), batch_size=4, shuffle=True)
    Trainer(strategy=XLAStrategy(), max_epochs=1, progress=False).fit_here(model, loader)
    return model.seen


def test_bug11_every_core_trained_on_the_same_data(xla_world):
    seen = xla_world.run(train_and_report_samples)
    assert all(len(samples) == 64 // xla_world.size for samples in seen)
    assert sorted(i for samples in seen for i in samples) == list(range(64))
