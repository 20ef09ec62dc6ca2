"""Properties Lightning's XLAStrategy tests (or its bugs) point at, checked on our own reference
strategy (strategy/, docs/strategy.md), on every rank of the session.

- Lightning's XLA FSDP tests start with `fabric.broadcast(tmp_path)`; Lightning's object
  broadcast reads the bytes back with `torch.load`, which torch >= 2.6 refuses for a Path
  (docs/lightning.md, "Broadcast of objects fails on torch 2.6+"). Ours must deliver it.
- Lightning's `all_gather` documents shape (world_size, ...) and concatenates instead
  (docs/lightning.md); ours must stack, for a non-scalar too.
"""

import sys
from pathlib import Path, PurePosixPath

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]  # strategy/ is reference code, not installed
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from strategy import XLAStrategy  # noqa: E402


def launched() -> XLAStrategy:
    strategy = XLAStrategy()
    strategy.setup_environment()
    return strategy


@pytest.mark.xla
def test_broadcast_of_a_path_arrives_as_that_path(xla_rank):
    strategy = launched()
    src = xla_rank.world_size - 1
    mine = {
        "dir": Path(f"/tmp/run-{xla_rank.rank}"),
        "pure": PurePosixPath("a") / str(xla_rank.rank),
    }
    got = strategy.broadcast(mine, src=src)
    assert got == {"dir": Path(f"/tmp/run-{src}"), "pure": PurePosixPath("a") / str(src)}
    assert type(got["dir"]) is type(Path("/"))


@pytest.mark.xla
def test_all_gather_of_a_vector_stacks_one_row_per_rank(xla_rank):
    strategy = launched()
    mine = torch.full((3,), float(xla_rank.rank), device=xla_rank.device)
    gathered = strategy.all_gather(mine)
    assert gathered.shape == (xla_rank.world_size, 3)
    assert gathered[:, 0].cpu().tolist() == [float(r) for r in range(xla_rank.world_size)]
