"""A training-strategy program for a multi-host slice, where local and global ranks differ.

    xlasim run --devices 4 --processes 2 --hosts 2 tests/properties/multihost_program.py OUT

Plain torch_xla and `strategy` code (no xlasim import), launched with the strategy's own
launcher. Every rank records what it sees in OUT/rank-<global rank>.json; global rank 0's launch
result is printed as JSON. `test_known_bugs.py` checks the records (known bugs 7 and 9): the
sampler shards by global rank, exactly one rank of the slice writes and removes checkpoints,
and a checkpoint that only global rank 0's host can see is still loaded by every rank.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch_xla.runtime as xr
from torch.utils.data import DataLoader, TensorDataset

from strategy import XLACheckpointIO, XLAStrategy
from strategy.sampling import with_distributed_sampler

SAMPLES = 16
#: Relative: each host of the slice has its own working directory (its own disk).
HOST_LOCAL_CHECKPOINT = "checkpoints/model.ckpt"


class RecordingIO(XLACheckpointIO):
    """Leaves a marker naming the global rank that wrote or removed."""

    def save_checkpoint(self, checkpoint, path, storage_options=None):
        super().save_checkpoint(checkpoint, path, storage_options)
        Path(path).with_name(f"written-by-{xr.global_ordinal()}").touch()

    def remove_checkpoint(self, path):
        super().remove_checkpoint(path)
        Path(path).with_name(f"removed-by-{xr.global_ordinal()}").touch()


def on_rank(out_dir: str) -> dict:
    strategy = XLAStrategy(checkpoint_io=RecordingIO())
    strategy.setup_environment()
    facts = {
        "global_rank": strategy.global_rank,
        "local_rank": strategy.local_rank,
        "node_rank": strategy.node_rank,
        "world_size": strategy.world_size,
        "is_global_zero": strategy.is_global_zero,
        "sampler_kwargs": strategy.distributed_sampler_kwargs,
    }
    loader = DataLoader(TensorDataset(torch.arange(SAMPLES)), batch_size=2)
    sharded = with_distributed_sampler(loader, **strategy.distributed_sampler_kwargs)
    device_loader = strategy.process_dataloader(sharded)
    facts["shard"] = [i for (batch,) in device_loader for i in batch.cpu().tolist()]

    shared = Path(out_dir) / "shared" / "model.ckpt"
    strategy.save_checkpoint({"saved_by": strategy.global_rank}, shared)
    facts["loaded_shared"] = strategy.load_checkpoint(shared)["saved_by"]
    strategy.remove_checkpoint(shared)
    facts["shared_exists_after_remove"] = shared.exists()

    strategy.save_checkpoint({"saved_by": strategy.global_rank}, HOST_LOCAL_CHECKPOINT)
    facts["host_sees_local_checkpoint"] = os.path.exists(HOST_LOCAL_CHECKPOINT)
    facts["loaded_local"] = strategy.load_checkpoint(HOST_LOCAL_CHECKPOINT)["saved_by"]

    Path(out_dir, f"rank-{strategy.global_rank}.json").write_text(json.dumps(facts))
    return facts


def main(out_dir: str) -> None:
    result = XLAStrategy().launcher.launch(on_rank, out_dir)
    print(json.dumps({"launch_result": result}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
