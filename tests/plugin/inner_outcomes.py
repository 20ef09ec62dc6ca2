"""Inner tests for test_plugin_outcomes.py: what the plugin receives from the ranks, written
as data (`OUTCOME_FIELDS` names the file) so that backends and topologies can be compared."""

import json
import os
import sys

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.runtime as xr

import xlasim


def _work():
    rank = xr.global_ordinal()
    print(f"out of rank {rank}")
    print(f"err of rank {rank}", file=sys.stderr)
    value = torch.ones(3, device=torch_xla.device()) * 7
    xm.mark_step()
    if rank == xr.world_size() - 1:
        raise ValueError(f"rank {rank} of {xr.world_size()} fails")
    return {"rank": rank, "total": value.sum().item()}


def _fields(outcome) -> dict:
    error = outcome.error
    return {
        "rank": outcome.rank,
        "size": outcome.size,
        "result": outcome.result,
        "error": None if error is None else f"{type(error).__name__}: {error}",
        "raised": outcome.raised,
        "released": outcome.released,
        # the traceback starts at the user's function (no frame of xlasim's) and ends at it
        "traceback": [
            line.strip()
            for line in outcome.traceback.splitlines()
            if "File" not in line and line.strip()
        ],
        "emulator frames": "xlasim" + os.sep in outcome.traceback,
        "stdout": outcome.stdout,
        "stderr": outcome.stderr,
        "timed": outcome.duration > 0,
        "compiled": (outcome.metrics or {}).get("compiled graphs", 0) > 0,
    }


def test_outcomes_of_a_failing_run(xla_world):
    with pytest.raises(xlasim.RankFailedError) as failure:
        xla_world.run(_work)
    outcomes = failure.value.outcomes
    assert [o.rank for o in outcomes] == list(range(xla_world.size))
    with open(os.environ["OUTCOME_FIELDS"], "w") as file:
        json.dump([_fields(o) for o in outcomes], file)


@pytest.mark.xla
def test_last_rank_fails(xla_rank):
    print(f"hello from rank {xla_rank.rank}")
    value = xla_rank.rank
    assert value != xla_rank.world_size - 1, "the last rank fails"
