"""The main job: train the guide's weight-sharing model on every core, checkpoint, resume.

    python -m strategy.demo --devices 8      # from the repository root
    python -m strategy.demo --devices 8 --spmd   # the same with FSDPv2: one SPMD program

On a TPU VM (PJRT_DEVICE=TPU) it runs on the real cores. Anywhere else it first emulates the
cores with xlasim; the training code below is the same either way. Phase 1 trains and saves a
checkpoint; phase 2 is a fresh launch that resumes from it and trains on; the run fails (exit 1)
unless the loss fell.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path


def _devices(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--devices takes a whole number or 'auto', got {text!r}"
        ) from None


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m strategy.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--devices", type=_devices, default=8, help="cores: 1, all (e.g. 8) or 'auto'"
    )
    parser.add_argument("--steps", type=int, default=16, help="optimizer steps in each phase")
    parser.add_argument("--batch-size", type=int, default=8, help="samples per core and step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--spmd",
        action="store_true",
        help="FSDPv2 (SPMD): one program shards the model and the batch over every core",
    )
    parser.add_argument(
        "--checkpoint-dir",
        type=Path,
        default=None,
        help="keep checkpoints here (default: a temporary directory)",
    )
    args = parser.parse_args(argv)
    if args.steps < 1 or args.batch_size < 1:
        parser.error("--steps and --batch-size must be positive")
    return args


def _platform(devices: int | str) -> str:
    """Emulate the cores unless running on a TPU; returns what the run is on."""
    if os.environ.get("PJRT_DEVICE", "").upper() == "TPU":
        return "TPU"
    import xlasim

    topology = xlasim.emulate(devices=8 if devices == "auto" else devices)
    return f"emulated by xlasim: {topology.describe()}"


def _loss_summary(losses: list[tuple[int, float]]) -> str:
    return f"loss {losses[0][1]:.4f} (step {losses[0][0]}) -> {losses[-1][1]:.4f} (step {losses[-1][0]})"


def _size(path: Path) -> int:
    """Bytes of a checkpoint: a file, or an SPMD checkpoint's directory."""
    if path.is_dir():
        return sum(part.stat().st_size for part in path.rglob("*") if part.is_file())
    return path.stat().st_size


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    platform = _platform(args.devices)
    mode = "FSDPv2 (SPMD)" if args.spmd else "data-parallel"
    print(f"strategy demo: {mode} training on {args.devices} XLA core(s), {platform}")

    import torch
    from torch.utils.data import DataLoader

    from strategy.spmd import SPMDStrategy
    from strategy.trainer import Trainer

    try:
        from fixtures.data import regression_data
        from fixtures.models import WeightSharingModule
    except ImportError as error:
        print(
            f"cannot import the demo's model and data ({error}): run from the repository root",
            file=sys.stderr,
        )
        return 2

    shape = (WeightSharingModule.in_features, WeightSharingModule.out_features)
    # An SPMD program takes the global batch (every core's samples) and splits it itself.
    cores = 8 if args.devices == "auto" else args.devices
    batch_size = args.batch_size * cores if args.spmd else args.batch_size
    train = DataLoader(regression_data(1536, *shape, seed=args.seed), batch_size, shuffle=True)
    val = DataLoader(regression_data(256, *shape, seed=args.seed + 1), batch_size)

    torch.manual_seed(args.seed)  # built once, here: every launch and every rank starts from it
    model = WeightSharingModule()
    print("model: WeightSharingModule, layer_3.weight tied to layer_1.weight", flush=True)

    with tempfile.TemporaryDirectory(prefix="strategy-demo-") as scratch:
        checkpoint_dir = args.checkpoint_dir or Path(scratch)
        started = time.monotonic()
        print(f"\nphase 1: train {args.steps} steps, then checkpoint", flush=True)
        first = Trainer(
            devices=args.devices,
            max_steps=args.steps,
            checkpoint_dir=checkpoint_dir,
            seed=args.seed,
            strategy=SPMDStrategy() if args.spmd else None,
        ).fit(model, train, val)
        checkpoint = Path(first.checkpoints[-1])
        print(f"saved {checkpoint} ({_size(checkpoint)} bytes)", flush=True)

        print(
            f"\nphase 2: a fresh launch resumes from it and trains {args.steps} more steps",
            flush=True,
        )
        second = Trainer(
            devices=args.devices,
            max_steps=2 * args.steps,
            checkpoint_dir=checkpoint_dir,
            seed=args.seed,
            strategy=SPMDStrategy() if args.spmd else None,
        ).fit(model, train, val, ckpt_path=checkpoint)

    tied = torch.equal(second.state_dict["layer_1.weight"], second.state_dict["layer_3.weight"])
    print(f"\nphase 1: {_loss_summary(first.losses)}")
    print(f"phase 2: {_loss_summary(second.losses[len(first.losses) :])}")
    print(f"weights still tied: {tied}; {time.monotonic() - started:.1f} s of training")
    losses = [loss for _, loss in second.losses]
    window = max(1, len(losses) // 4)  # compare averages: a single step's loss is noisy
    falling = sum(losses[-window:]) < sum(losses[:window])
    print("the loss fell" if falling else "the loss did NOT fall", flush=True)
    return 0 if falling and tied else 1


if __name__ == "__main__":
    sys.exit(main())
