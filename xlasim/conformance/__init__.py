"""The conformance runner: torch_xla's own multi-device tests, unmodified, on emulated cores.

    python -m xlasim conformance PATH/TO/xla/test [--devices 8] [--processes P] [--timeout S]
                        [-k SUBSTRING] [--json FILE] [--suite mp|spmd|tpu|all] [--logs DIR]

Each test file runs in its own subprocess (`discovery` decides how: as a script under
`xlasim run`, under pytest, or both), bounded by a timeout (`execution`, over the runners' kit
`xlasim.runners`); `classify` turns what came back into rows, never counting a script that
tested nothing as a pass (reading the output with the kit's `reasons`, and knowing a few tests
by name from `expectations`), and the kit's `table` prints them. The exit status is non-zero
when any row failed, crashed, timed out or silently skipped, so the command can gate CI.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..runners.execution import Slice
from ..runners.jobs import run_jobs, run_without_crashes, scratch_space
from ..runners.options import add_runner_options
from ..runners.rows import Row, crashed_test
from ..runners.table import finish
from .baseline import compare
from .classify import classify
from .discovery import PYTEST, SUITES, TorchXlaJob, discover
from .execution import execute

DEFAULT_TIMEOUT_S = 600.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `conformance` subcommand's options (the parser is built by `xlasim.cli`)."""
    parser.add_argument("test_dir", type=Path, help="the test/ directory of a pytorch/xla checkout")
    add_runner_options(parser, timeout=DEFAULT_TIMEOUT_S)
    parser.add_argument(
        "--suite",
        choices=sorted(SUITES),
        default="mp",
        help="which files: mp (replica-style: test_mp_*, torch_distributed/, ...), spmd "
        "(spmd/test_*.py), tpu (the other files with a TPU gate, each also run natively), all "
        "(default mp)",
    )


def run_job(job: TorchXlaJob, slice: Slice, timeout: float, logs: Path) -> list[Row]:
    """Run one job and classify it; a job with a baseline (the `tpu` suite) runs natively
    first, with a time budget of its own, and its rows say what the emulated identity changed
    (`baseline`).

    Args:
        job: one torch_xla test file (or one test of it) in one mode.
        slice: the emulated slice it runs on.
        timeout: seconds for the emulated runs together (a rerun without a crashed test
            shares them); the native run gets as many again.
        logs: the directory under which each run gets a working directory named by the job's
            slug (its output, junit and report files).
    """
    if job.baseline and job.gates is not None:
        outcome = execute(job, slice, timeout, logs / f"{job.slug}.native", native=True)
        native = classify(job, outcome)
        return compare(_run_emulated(job, slice, timeout, logs), native, job.gates)
    return _run_emulated(job, slice, timeout, logs)


def _run_emulated(job: TorchXlaJob, slice: Slice, timeout: float, logs: Path) -> list[Row]:
    """Run one job on the emulated slice and classify it; a pytest file whose process died in
    a test runs again without that test (`run_without_crashes`)."""
    rows: list[Row] = []

    def attempt(job: TorchXlaJob, timeout: float) -> str | None:
        suffix = f".without-{len(job.deselect)}" if job.deselect else ""
        outcome = execute(job, slice, timeout, logs / f"{job.slug}{suffix}")
        rows.extend(classify(job, outcome))
        return crashed_test(outcome) if job.mode == PYTEST else None

    run_without_crashes(job, timeout, attempt)
    return rows


def run_conformance(options: argparse.Namespace) -> int:
    """Run the selected files, print the table; 1 if any row must fail a CI gate, else 0."""
    root = options.test_dir.resolve()
    jobs = discover(root, options.suite, options.select)
    if not jobs:
        matching = f" with {options.select!r} in their path" if options.select else ""
        print(
            f"xlasim conformance: no {options.suite} test files under {root}{matching}",
            file=sys.stderr,
        )
        return 2
    slice = Slice(options.devices, options.processes)
    with scratch_space("conformance", options.logs) as (_, logs):
        rows = run_jobs(
            jobs, lambda job: job.label, lambda job: run_job(job, slice, options.timeout, logs)
        )
    return finish(rows, options.json)


__all__ = ["Row", "add_arguments", "run_conformance"]
