"""Checkpoint IO through XLAStrategy on every rank: rank-0-only atomic writes, every rank running the
same collectives, and clear errors that every rank raises alike."""

import pickle
import threading
from pathlib import Path

import pytest
import torch
import torch_xla.runtime as xr

from fixtures.models import WeightSharingModule
from strategy import (
    CheckpointCorruptError,
    CheckpointError,
    CheckpointNotFoundError,
    XLACheckpointIO,
    XLAStrategy,
)
from strategy.tying import move_module


class RecordingIO(XLACheckpointIO):
    """Leaves a marker naming the global rank that wrote (files: ranks may be processes)."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        super().save_checkpoint(checkpoint, path, storage_options)
        Path(path).with_name(f"written-by-{xr.global_ordinal()}").touch()


def launched(**kwargs) -> XLAStrategy:
    strategy = XLAStrategy(**kwargs)
    strategy.setup_environment()
    return strategy


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


@pytest.mark.xla
def test_save_writes_once_on_global_rank_zero_and_every_rank_can_load(xla_rank, tmp_path):
    strategy = launched(checkpoint_io=RecordingIO())
    rank = xla_rank.rank
    path = tmp_path / "ckpt" / "model.ckpt"
    checkpoint = {"rank": rank, "weights": torch.full((4,), float(rank), device=xla_rank.device)}

    strategy.save_checkpoint(checkpoint, path)

    # save returned on every rank only once the file was complete: every rank can read it now
    assert sorted(p.name for p in path.parent.glob("written-by-*")) == ["written-by-0"]
    loaded = strategy.load_checkpoint(path)
    assert loaded["rank"] == 0
    assert loaded["weights"].device == torch.device("cpu")
    assert loaded["weights"].tolist() == [0.0] * 4
    assert leftovers(path.parent) == []


@pytest.mark.xla
def test_failed_save_leaves_the_previous_file_and_raises_on_every_rank(xla_rank, tmp_path):
    strategy = launched()
    path = tmp_path / "model.ckpt"
    strategy.save_checkpoint({"version": 1}, path)

    with pytest.raises((pickle.PicklingError, TypeError, AttributeError)) as raised:
        strategy.save_checkpoint({"version": 2, "lock": threading.Lock()}, path)

    assert "global rank 0" in " ".join(getattr(raised.value, "__notes__", []))
    assert strategy.load_checkpoint(path) == {"version": 1}
    assert leftovers(tmp_path) == []


@pytest.mark.xla
def test_saved_state_roundtrips_views_containers_modules_and_pending_graphs(xla_rank, tmp_path):
    strategy = launched()
    base = torch.arange(6.0, device=xla_rank.device) * 3  # pending graph, never synced
    model = move_module(WeightSharingModule(), xla_rank.device)
    checkpoint = {
        "nested": {"pair": [base, base[2:4]], "tuple": (base.view(2, 3), {"deep": base + 1})},
        "module": model,
        "state_dict": model.state_dict(),
        "step": 7,
    }
    strategy.save_checkpoint(checkpoint, tmp_path / "c.ckpt")
    loaded = strategy.load_checkpoint(tmp_path / "c.ckpt", weights_only=False)

    expected = torch.arange(6.0) * 3
    assert torch.equal(loaded["nested"]["pair"][0], expected)
    assert torch.equal(loaded["nested"]["pair"][1], expected[2:4])
    assert torch.equal(loaded["nested"]["tuple"][0], expected.view(2, 3))
    assert torch.equal(loaded["nested"]["tuple"][1]["deep"], expected + 1)
    module = loaded["module"]
    assert module.layer_3.weight is module.layer_1.weight  # still tied after the round trip
    assert module.layer_1.weight.device == torch.device("cpu")
    assert torch.equal(module.layer_1.weight, loaded["state_dict"]["layer_1.weight"])
    assert loaded["step"] == 7


@pytest.mark.xla
def test_weights_only_loading_of_a_module_says_how_to_proceed(xla_rank, tmp_path):
    strategy = launched()
    strategy.save_checkpoint({"module": WeightSharingModule()}, tmp_path / "m.ckpt")
    with pytest.raises(CheckpointError, match="weights_only=False"):
        strategy.load_checkpoint(tmp_path / "m.ckpt")


def _write_damaged_checkpoints(directory: Path) -> None:
    XLACheckpointIO().save_checkpoint({"w": torch.arange(100.0)}, directory / "good.ckpt")
    data = (directory / "good.ckpt").read_bytes()
    (directory / "truncated.ckpt").write_bytes(data[: len(data) // 2])
    (directory / "garbage.ckpt").write_bytes(b"not a checkpoint at all")
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF  # inside a tensor's payload: torch.load would not notice
    (directory / "flipped.ckpt").write_bytes(bytes(flipped))


@pytest.mark.xla
def test_missing_truncated_and_corrupt_files_raise_clear_errors_on_every_rank(xla_rank, tmp_path):
    strategy = launched()
    if strategy.is_global_zero:
        _write_damaged_checkpoints(tmp_path)
    strategy.barrier("files written")

    with pytest.raises(CheckpointNotFoundError, match=r"checkpoint not found: .*missing\.ckpt"):
        strategy.load_checkpoint(tmp_path / "missing.ckpt")
    with pytest.raises(CheckpointCorruptError, match=r"truncated\.ckpt is truncated or corrupt"):
        strategy.load_checkpoint(tmp_path / "truncated.ckpt")
    with pytest.raises(CheckpointCorruptError, match=r"garbage\.ckpt is truncated or corrupt"):
        strategy.load_checkpoint(tmp_path / "garbage.ckpt")
    with pytest.raises(CheckpointCorruptError, match=r"flipped\.ckpt is corrupt: .*CRC"):
        strategy.load_checkpoint(tmp_path / "flipped.ckpt")
    assert torch.equal(strategy.load_checkpoint(tmp_path / "good.ckpt")["w"], torch.arange(100.0))


@pytest.mark.xla
def test_storage_options_are_refused_on_every_rank_before_writing(xla_rank, tmp_path):
    strategy = launched()
    with pytest.raises(TypeError, match=r"storage_options=.*not supported"):
        strategy.save_checkpoint({"a": 1}, tmp_path / "a.ckpt", storage_options={"mode": "s3"})
    strategy.barrier("after refusal")
    assert not (tmp_path / "a.ckpt").exists()


@pytest.mark.xla
def test_remove_checkpoint_removes_on_global_rank_zero_for_everyone(xla_rank, tmp_path):
    strategy = launched()
    path = tmp_path / "old.ckpt"
    strategy.save_checkpoint({"a": 1}, path)
    strategy.remove_checkpoint(path)
    assert not path.exists()  # every rank returns after the removal
    strategy.remove_checkpoint(path)  # removing what is gone is not an error


def test_checkpoint_io_refuses_non_dict_state(tmp_path):
    with pytest.raises(TypeError, match="a checkpoint is a dict of state, got list"):
        XLACheckpointIO().save_checkpoint([1, 2], tmp_path / "x.ckpt")
