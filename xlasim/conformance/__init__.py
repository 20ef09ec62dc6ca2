"""The conformance runner: torch_xla's own multi-device tests, unmodified, on emulated cores.

    python -m xlasim conformance PATH/TO/xla/test [--devices 8] [--processes P] [--timeout S]
                        [-k SUBSTRING] [--json FILE] [--suite mp|spmd|tpu|all] [--logs DIR]

Each test file runs in its own subprocess (`discovery` decides how: as a script under
`xlasim run`, under pytest, or both), bounded by a timeout (`execution`); `classify` turns what
came back into rows, never counting a script that tested nothing as a pass (reading the output
with `reasons`, and knowing a few tests by name from `expectations`), and `table` prints them. The exit status is non-zero when any row failed, crashed, timed out or silently skipped,
so the command can gate CI.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
import time
from pathlib import Path

from .baseline import compare
from .classify import Row, classify, crashed_test
from .discovery import SUITES, Job, discover
from .execution import Slice, execute
from .runner_options import add_runner_options
from .table import finish, print_progress

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


def run_job(job: Job, slice: Slice, timeout: float, logs: Path) -> list[Row]:
    """Run one job and classify it; a job with a baseline (the `tpu` suite) runs natively
    first, with a time budget of its own, and its rows say what the emulated identity changed
    (`baseline`)."""
    if job.baseline and job.gates is not None:
        outcome = execute(job, slice, timeout, logs / f"{job.slug}.native", native=True)
        native = classify(job, outcome)
        return compare(_run_emulated(job, slice, timeout, logs), native, job.gates)
    return _run_emulated(job, slice, timeout, logs)


def _run_emulated(job: Job, slice: Slice, timeout: float, logs: Path) -> list[Row]:
    """Run one job on the emulated slice and classify it. A pytest file whose process died in
    a test (XLA aborts on a collective it cannot complete) runs again without that test, within
    the same time budget, so one crashing test does not hide the results of the others."""
    deadline = time.monotonic() + timeout
    rows: list[Row] = []
    workdir = logs / job.slug
    while True:
        outcome = execute(job, slice, timeout, workdir)
        rows.extend(classify(job, outcome))
        crashed = crashed_test(job, outcome)
        timeout = deadline - time.monotonic()
        if crashed is None or crashed in job.deselect or timeout <= 0:
            return rows
        job = dataclasses.replace(job, deselect=(*job.deselect, crashed))
        workdir = logs / f"{job.slug}.without-{len(job.deselect)}"


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
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="xlasim-conformance-") as scratch:
        logs = options.logs.resolve() if options.logs else Path(scratch)
        for number, job in enumerate(jobs, 1):
            print(f"[{number}/{len(jobs)}] {job.label} ...", file=sys.stderr, flush=True)
            found = run_job(job, slice, options.timeout, logs)
            print_progress(found)
            rows.extend(found)
    return finish(rows, options.json)


__all__ = ["Row", "add_arguments", "run_conformance"]
