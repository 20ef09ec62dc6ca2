"""transformers' `Trainer` on the session's slice, unchanged: its TPU detection, training on
every core with checkpoints and a resume, each checked against what the same code computes on
one device where the math makes them equal (docs/huggingface.md).

transformers is not a dependency of xlasim: without it (`pip install 'xlasim[huggingface]'`)
these tests skip, saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip(
    "transformers", reason="transformers is not installed (pip install 'xlasim[huggingface]')"
)

import torch

from fixtures.huggingface.tiny_trainer import train

ROOT = Path(__file__).resolve().parents[2]
STEPS, BATCH, SAVE = 4, 2, 2
#: N cores against one device: the same sums in another order, so the comparison needs f32-like
#: products. A TPU's default precision rounds every matmul operand to bf16 (xlasim computes as
#: the TPU does, docs/tpu-arithmetic.md), which the order of the sums would then amplify.
PRECISION = "highest"


def _sees_the_slice() -> dict:
    from accelerate.state import AcceleratorState
    from transformers import TrainingArguments
    from transformers.training_args import ParallelMode
    from transformers.utils import is_torch_xla_available

    AcceleratorState._reset_state(reset_partial_state=True)
    args = TrainingArguments(output_dir="unused", report_to="none")
    return {
        "tpu": is_torch_xla_available(check_is_tpu=True),
        "mode": args.parallel_mode == ParallelMode.TPU,
        "world": args.world_size,
        "rank": args.process_index,
        "device": args.device.type,
    }


def test_trainer_sees_the_slice(xla_world, emulated):
    """transformers' own gate (`is_torch_xla_available(check_is_tpu=True)`) opens by itself,
    and every rank's TrainingArguments know the world and their place in it."""
    found = xla_world.run(_sees_the_slice)
    size = xla_world.size
    assert found == [
        {"tpu": True, "mode": True, "world": size, "rank": rank, "device": "xla"}
        for rank in range(size)
    ]


def _expected_files(world: int) -> set[str]:
    shared = {"config.json", "generation_config.json", "model.safetensors", "optimizer.pt"}
    shared |= {"scheduler.pt", "trainer_state.json", "training_args.bin"}
    return shared | {f"rng_state_{rank}.pth" for rank in range(world)}


#: Three Trainer runs, each compiling its graphs on every rank: minutes on a loaded 2-core machine.
SLOW_RUN_S = 900


@pytest.mark.xla_min_devices(2)
@pytest.mark.xla_timeout(SLOW_RUN_S)
def test_trainer_trains_checkpoints_and_resumes(xla_world, tmp_path):
    """On every core: the Trainer trains (a step on N cores with B samples each equals a step
    on one device with N*B samples: same losses, same weights), writes each checkpoint once
    with one RNG file per rank, keeps the output layer tied, and resumed from a mid-run
    checkpoint it continues to the same losses and weights, bit for bit, as the run that was
    never interrupted."""
    size = xla_world.size
    first = tmp_path / "run"
    ranks = xla_world.run(
        train, str(first), steps=STEPS, batch=BATCH, save_steps=SAVE, precision=PRECISION
    )
    assert [r["rank"] for r in ranks] == list(range(size))
    assert {r["world"] for r in ranks} == {size}
    assert all(r["tied"] for r in ranks)
    losses = ranks[0]["losses"]
    assert len(losses) == STEPS and all(r["losses"] == losses for r in ranks)

    for step in (SAVE, STEPS):
        written = {p.name for p in (first / f"checkpoint-{step}").iterdir()}
        assert written == _expected_files(size), step

    # One device, N times the batch: the same samples per step (accelerate shards each global
    # batch across the ranks), the gradients' mean over ranks is the global batch's gradient.
    (alone,) = xla_world.run_on(
        1, train, str(tmp_path / "alone"), steps=STEPS, batch=BATCH * size, precision=PRECISION
    )
    assert alone["world"] == 1
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(alone["losses"]))
    for name, value in ranks[0]["weights"].items():
        torch.testing.assert_close(value, alone["weights"][name], msg=name)

    resumed_dir = tmp_path / "resumed"
    shutil.copytree(first / f"checkpoint-{SAVE}", resumed_dir / f"checkpoint-{SAVE}")
    resumed = xla_world.run(
        train,
        str(resumed_dir),
        steps=STEPS,
        batch=BATCH,
        save_steps=SAVE,
        resume=str(resumed_dir / f"checkpoint-{SAVE}"),
        precision=PRECISION,
    )
    assert all(r["tied"] for r in resumed)
    # The log history holds the checkpoint's steps, then those run after the resume.
    assert resumed[0]["losses"] == losses
    for name, value in ranks[0]["weights"].items():
        assert torch.equal(resumed[0]["weights"][name], value), name


def _train_exactly(output_dir: str, **options) -> dict:
    """`train` with the CPU's exact f32 matmuls (XLASIM_ARITHMETIC=exact, read at every op):
    native torch_xla on a CPU ignores the TPU's precision, and this comparison is about what
    else emulation changes (random streams, launch), not the arithmetic (tests/core covers it)."""
    saved = os.environ.get("XLASIM_ARITHMETIC")
    os.environ["XLASIM_ARITHMETIC"] = "exact"
    try:
        return train(output_dir, **options)
    finally:
        if saved is None:
            del os.environ["XLASIM_ARITHMETIC"]
        else:
            os.environ["XLASIM_ARITHMETIC"] = saved


def _native_losses(tmp_path: Path, dropout: float, as_on_a_tpu: bool) -> list[float]:
    """The tiny Trainer run on native torch_xla, one CPU device, without xlasim; with
    accelerate taking its TPU branches (`as_on_a_tpu`, fixtures/huggingface/tiny_trainer.py)
    or those of a CPU device."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PJRT_", "CPU_"))}
    env.update(PJRT_DEVICE="CPU", CPU_NUM_DEVICES="1", PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "fixtures/huggingface/tiny_trainer.py"),
            str(tmp_path / f"native-{as_on_a_tpu}"),
            f"--steps={STEPS}",
            f"--batch={BATCH}",
            f"--dropout={dropout}",
            *(["--accelerate-as-on-a-tpu"] if as_on_a_tpu else []),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])["losses"]


@pytest.mark.parametrize(
    "dropout",
    [0.0, pytest.param(0.1, marks=pytest.mark.extended)],  # 27 s: outside CI (docs/testing.md)
    ids=["no-dropout", "dropout"],
)
@pytest.mark.xla_timeout(SLOW_RUN_S)
@pytest.mark.same_on_every_slice  # 15-18 s at each slice size, for the same world of one
def test_world_of_one_equals_native_torch_xla(xla_world, tmp_path, emulated, dropout):
    """A Trainer run on a world of 1 computes what native torch_xla computes on one device
    when accelerate takes the branches it takes on a TPU, loss for loss, bit for bit (random
    streams included when dropout is on). On a CPU device accelerate does not mark a step when
    gradients sync, which moves the random seed: with dropout on, that run draws other masks."""
    (emulated_run,) = xla_world.run_on(
        1, _train_exactly, str(tmp_path / "emulated"), steps=STEPS, batch=BATCH, dropout=dropout
    )
    assert emulated_run["losses"] == _native_losses(tmp_path, dropout, as_on_a_tpu=True)
    if dropout:
        assert emulated_run["losses"] != _native_losses(tmp_path, dropout, as_on_a_tpu=False)
