"""Worker: what compiling costs a training script on emulated cores (issue 24).

`python benchmarks/compilation.py --devices N [--mode isolated|threads] [--share]` prints one
record: the
issue's model (12 blocks of Linear 256, GELU, LayerNorm), AdamW, 4 training steps with a sync
after each, run on every rank of a fresh world, with the wall time of that run and the XLA
compilations it made (torch_xla's `UncachedCompile` counter and `CompileTime` metric).

On a TPU slice every process compiles its own graph on its own host's CPU, so compile time does
not grow with the chip count; here N ranks compile on one machine's cores. The orchestrator
runs N = 1 and N = 8 (both modes, and threads with `--share`: ranks of one process taking
turns, `XLASIM_SHARE_COMPILATIONS=1`) back to back and judges 8 ranks against 1.
"""

from __future__ import annotations

import argparse
import os
import time

from common import add_mode_argument, emit, emulate

BLOCKS, WIDTH, BATCH, STEPS = 12, 256, 64, 4


def noop(rank: int) -> None:
    """Starts the ranks (and their runtimes) before the clock does."""


def compile_counts() -> tuple[int, float]:
    """This process's compilations so far and the seconds they took."""
    import torch_xla.debug.metrics as met

    compile_time = met.metric_data("CompileTime")
    seconds = compile_time[1] / 1e9 if compile_time else 0.0
    return met.counter_value("UncachedCompile") or 0, seconds


def train(rank: int) -> dict:
    """The issue's training run on this rank; what it compiled and its last loss."""
    import torch
    import torch_xla

    before = compile_counts()
    device = torch_xla.device()
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(BLOCKS):
        layers += [torch.nn.Linear(WIDTH, WIDTH), torch.nn.GELU(), torch.nn.LayerNorm(WIDTH)]
    model = torch.nn.Sequential(*layers).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    batch = torch.randn(BATCH, WIDTH).to(device)
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = model(batch).pow(2).mean()
        loss.backward()
        optimizer.step()
        torch_xla.sync()
    after = compile_counts()
    return {
        "loss": loss.item(),
        "compilations": after[0] - before[0],
        "compile_s": after[1] - before[1],
    }


def measure(devices: int, mode: str, share: bool) -> dict:
    """One training run on every rank of a warm world of `devices`, timed from launch to the
    last rank's end. Counters are per process: in threads mode every rank reads the one
    process's, so the totals are read here, around the run."""
    import xlasim
    from xlasim.compilation import turns

    os.environ[turns.SWITCH] = "1" if share else "0"
    emulate(devices, mode)
    world = xlasim.world()
    world.run(noop)
    before = compile_counts()
    began = time.perf_counter()
    results = world.run(train)
    wall = time.perf_counter() - began
    after = compile_counts()
    per_rank = list(results)
    threaded = world.topology.threaded and devices > 1
    return {
        "op": "compile_mlp_shared" if share else "compile_mlp",
        "mode": mode,
        "devices": devices,
        "topology": world.topology.describe(),
        "xlasim_s": wall,
        "compilations": (after[0] - before[0])
        if threaded
        else sum(r["compilations"] for r in per_rank),
        "compile_s": (after[1] - before[1]) if threaded else sum(r["compile_s"] for r in per_rank),
        "rank_compilations": None if threaded else [r["compilations"] for r in per_rank],
        "losses": [r["loss"] for r in per_rank],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_mode_argument(parser)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument(
        "--share", action="store_true", help="ranks of one process take turns at compiling"
    )
    args = parser.parse_args()
    emit(measure(args.devices, args.mode, args.share))


if __name__ == "__main__":
    main()
