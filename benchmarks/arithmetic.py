"""The TPU's arithmetic (issue 23): the demo's training step with f32 matmuls computed as on a
TPU (the default) against the CPU's exact f32 (`XLASIM_ARITHMETIC=exact`), in one process.

    python benchmarks/arithmetic.py     # worker: prints one record

The step is the demo's (strategy/demo.py): its weight-sharing model, batch of 8 regression
samples, MSE loss, SGD with momentum through `xm.optimizer_step`, then `torch_xla.sync(wait=
True)`, on one emulated core (a rank thread). The two arithmetics alternate block by block in the
same rank (the switch is read at every call, and each has its own compiled step after warm-up),
so drift on the shared machine hits both alike; the figure is the ratio of their medians.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from common import emit, parse_records

ROOT = Path(__file__).resolve().parent.parent
ARITHMETIC_ENV = "XLASIM_ARITHMETIC"  # xlasim/tpu/arithmetic_choice.py
BATCH = 8
WARMUP_STEPS, BLOCK_STEPS, BLOCKS = 3, 20, 10
TIMEOUT_S = 300.0


def train_blocks(rank: int) -> dict[str, list[float]]:
    """Seconds of each timed step, by arithmetic, blocks alternating (run on the rank)."""
    import torch
    import torch_xla
    import torch_xla.core.xla_model as xm

    sys.path.insert(0, str(ROOT))
    from fixtures.data import regression_data
    from fixtures.models import WeightSharingModule

    torch.manual_seed(0)
    model = WeightSharingModule().to(torch_xla.device())
    optimizer = model.configure_optimizers()
    data = regression_data(BATCH, model.in_features, model.out_features, seed=0)
    x, y = (t.to(torch_xla.device()) for t in data.tensors)
    times: dict[str, list[float]] = {"tpu": [], "exact": []}
    for block in range(BLOCKS):
        arithmetic = "tpu" if block % 2 == 0 else "exact"
        os.environ[ARITHMETIC_ENV] = arithmetic
        for step in range(WARMUP_STEPS * (block < 2) + BLOCK_STEPS):
            began = time.perf_counter()
            loss = model.training_step((x, y), step)
            loss.backward()
            xm.optimizer_step(optimizer)
            optimizer.zero_grad(set_to_none=True)
            torch_xla.sync(wait=True)
            if step >= WARMUP_STEPS * (block < 2):
                times[arithmetic].append(time.perf_counter() - began)
    os.environ.pop(ARITHMETIC_ENV)
    if not torch.isfinite(loss.detach().cpu()):
        raise RuntimeError(f"the step's loss is {loss.item()}")
    return times


def step_record() -> dict[str, Any]:
    import xlasim

    xlasim.emulate(devices=1, processes=1)
    [times] = xlasim.world().run(train_blocks)
    tpu, exact = statistics.median(times["tpu"]), statistics.median(times["exact"])
    return {
        "op": "arithmetic_step",
        "devices": 1,
        "mode": "threads",
        "xlasim_s": tpu,
        "exact_s": exact,
        "tpu_over_exact": tpu / exact,
        "steps_s": times,
    }


def records(notes: list[str], progress: Any) -> list[dict[str, Any]]:
    """The worker's record, for benchmarks/run.py."""
    from processes import run_script

    progress("demo training step, TPU arithmetic vs exact f32")
    finished = run_script("arithmetic.py", [], TIMEOUT_S)
    if not finished.ok:
        notes.append(f"arithmetic step: {finished.failure()}")
    return parse_records(finished.stdout)


def lines(records: list[dict[str, Any]]) -> list[str]:
    """How the record reads on screen."""
    return [
        f"demo training step, 1 emulated core: TPU arithmetic {r['xlasim_s'] * 1e3:.2f} ms, "
        f"exact f32 {r['exact_s'] * 1e3:.2f} ms (median of {len(r['steps_s']['tpu'])} steps "
        f"each): {r['tpu_over_exact']:.2f}x"
        for r in records
        if r["op"] == "arithmetic_step"
    ]


if __name__ == "__main__":
    emit(step_record())
