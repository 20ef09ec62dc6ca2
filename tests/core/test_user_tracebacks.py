"""A failing rank's traceback shows the user's frames only, wherever in xlasim it failed.

The user's line is where the failure is, as on a TPU (where the same call fails at the same
line): the frames of the launch machinery before it and of the emulation it called into are
xlasim's, and a report that showed them would send the reader into the emulator. One failure is
raised in each layer of the core (docs/architecture.md), from a function each rank runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import torch_xla
import torch_xla.core.xla_model as xm
import torch_xla.distributed.xla_multiprocessing as xmp

import xlasim
from xlasim.reports.frames import PACKAGE_DIR
from xlasim.reports.hang_report import rank_span
from xlasim.trace_files import canonical


def in_base(rank: int) -> None:
    xlasim.Topology(devices=0)  # DeviceCountError, raised in base/topology.py


def in_reports(rank: int) -> None:
    rank_span([])  # IndexError, raised in reports/hang_report.py


def in_trace_files(rank: int) -> None:
    canonical.parse("all_reduce")  # ValueError (no `rank N` line) in trace_files/canonical.py


def in_tpu(rank: int) -> None:
    xlasim.emulate(arithmetic="bf16")  # ValueError, raised in tpu/arithmetic_choice.py


def in_emulation(rank: int) -> None:
    xm.all_reduce("bogus", torch.ones(2, device=torch_xla.device()))  # ValueError, in combine.py


def in_ranks(rank: int) -> None:
    xmp.spawn(print)  # RuntimeError: a launch inside a rank, raised in ranks/warm_world.py


def in_entry_points(rank: int) -> None:
    xlasim.emulate(devices=-1)  # DeviceCountError, raised in activation.py


def raised_in(error: BaseException) -> Path:
    """The file of the innermost frame of `error`'s traceback: where it was raised."""
    tb = error.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return Path(tb.tb_frame.f_code.co_filename)


@pytest.mark.parametrize(
    ("fn", "layer", "line"),
    [
        (in_base, "base", "xlasim.Topology(devices=0)"),
        (in_reports, "reports", "rank_span([])"),
        (in_trace_files, "trace_files", 'canonical.parse("all_reduce")'),
        (in_tpu, "tpu", 'xlasim.emulate(arithmetic="bf16")'),
        (in_emulation, "emulation", 'xm.all_reduce("bogus"'),
        (in_ranks, "ranks", "xmp.spawn(print)"),
        (in_entry_points, "", "xlasim.emulate(devices=-1)"),
    ],
)
def test_a_failure_raised_in_each_layer_shows_only_the_users_frames(
    world, fn: Callable[[int], None], layer: str, line: str
) -> None:
    outcome = world.run_outcomes(fn, size=2)[1]
    assert outcome.raised
    raised = raised_in(outcome.error)
    top_folder = raised.parent.relative_to(PACKAGE_DIR).parts[:1]  # () at the package's top
    assert top_folder == Path(layer).parts, f"raised in {raised}, not in {layer}/"
    lines = outcome.traceback.splitlines()
    files = [text.strip() for text in lines if text.strip().startswith("File ")]
    assert files and all(PACKAGE_DIR not in f for f in files), lines
    assert any(f'"{__file__}"' in f and f.endswith(f"in {fn.__name__}") for f in files), files
    assert line in outcome.traceback
    assert f"{type(outcome.error).__name__}: " in lines[-1]
