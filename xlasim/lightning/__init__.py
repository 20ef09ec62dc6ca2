"""The Lightning runner: Lightning's own TPU tests, unmodified, on emulated cores.

    python -m xlasim lightning PATH/TO/lightning [--devices 8] [--processes P] [--timeout S]
                        [--suite pytorch|fabric|all] [-k SUBSTRING] [--json FILE] [--logs DIR]
    python -m xlasim lightning --reclassify DIR [DIR...]    # the table again from kept logs

Lightning marks its TPU tests `RunIf(tpu=True)`; whether they run is decided by Lightning itself
(`XLAAccelerator.is_available()` on the emulated slice, never forced), and `PL_RUN_TPU_TESTS=1`
keeps only those (`discovery`, `execution`). Each file runs in its own pytest process; its
`standalone=True` tests then run one per process, as Lightning's CI runs them. Every non-pass
gets a class: a finding documented in docs/lightning.md (`findings`) when its signature is in
the output, else an unexplained failure (`classify`). The exit status is 1 when a row failed,
crashed or timed out, so the command can gate CI. Lightning is not a dependency of xlasim:
install it (and its test requirements) next to xlasim to use this.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sys
from pathlib import Path

from ..runners.execution import Slice
from ..runners.jobs import run_jobs, run_without_crashes, scratch_space
from ..runners.options import add_runner_options
from ..runners.rows import Row, crashed_test
from ..runners.table import finish
from .classify import classify
from .discovery import SUITES, TestFile, discover, tests_dir
from .execution import RECORD, LightningJob, execute, load

DEFAULT_TIMEOUT_S = 600.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `lightning` subcommand's options (the parser is built by `xlasim.cli`)."""
    parser.add_argument(
        "checkout", type=Path, nargs="?", help="a Lightning checkout (or its tests/ folder)"
    )
    add_runner_options(parser, timeout=DEFAULT_TIMEOUT_S)
    parser.add_argument(
        "--topology",
        metavar="NAME",
        default=None,
        help="a named slice instead of --devices (see `xlasim topologies`), e.g. v4-8",
    )
    parser.add_argument("--suite", choices=sorted(SUITES), default="all", help="default: all")
    parser.add_argument(
        "--reclassify",
        type=Path,
        nargs="+",
        metavar="LOGS",
        default=None,
        help="run nothing: classify again the runs kept by earlier --logs LOGS (in this order)",
    )


def run_until_done(
    run: LightningJob, slice: Slice, timeout: float, logs: Path
) -> tuple[list[Row], list[str]]:
    """Run `run`; when a test kills the process (no junit), record it as crashed and run the
    rest again without it, within the same time budget (a standalone test runs once). Its rows,
    and the ids of the standalone tests a file's run skipped (for `run_file` to run alone).

    Args:
        run: a file's shared-process tests, or one standalone test.
        slice: the emulated slice it runs on.
        timeout: seconds for all of its runs together.
        logs: the directory under which each run gets a numbered working directory (its
            output, junit file and record for `--reclassify`).
    """
    rows: list[Row] = []
    standalone: list[str] = []

    def attempt(run: LightningJob, timeout: float) -> str | None:
        workdir = logs / f"{next(_SEQUENCE):03d}-{run.slug}.{len(run.deselect)}"
        outcome = execute(run, slice, timeout, workdir)
        found, skipped = classify(run, outcome)
        rows.extend(found)
        standalone.extend(skipped)
        return None if run.standalone else crashed_test(outcome)

    run_without_crashes(run, timeout, attempt)
    return rows, standalone


def run_file(test_file: TestFile, slice: Slice, timeout: float, logs: Path) -> list[Row]:
    """A file's rows: its shared-process tests, then each standalone test in a process alone.

    Args:
        test_file: a file with `RunIf(tpu=True)` tests, in the copy of Lightning's tests/.
        slice: the emulated slice every process runs on.
        timeout: seconds for the file's shared-process run, and as many again for each
            standalone test.
        logs: the directory under which each run gets a working directory.
    """
    rows, standalone = run_until_done(
        LightningJob(test_file.tests, test_file.rel, standalone=False), slice, timeout, logs
    )
    for id in standalone:
        found, _ = run_until_done(
            LightningJob(test_file.tests, id, standalone=True), slice, timeout, logs
        )
        rows.extend(found)
    return rows


_SEQUENCE = itertools.count(1)


def reclassify(logs: Path) -> list[Row]:
    """The rows of the runs an earlier invocation kept under `logs`, classified with today's
    findings (a finding added after a long run applies without running the tests again)."""
    rows: list[Row] = []
    for workdir in sorted(p.parent for p in logs.glob(f"*/{RECORD}")):
        outcome = load(workdir)
        recorded = json.loads((workdir / RECORD).read_text())["run"]
        run = LightningJob(
            Path(recorded["tests"]),
            recorded["target"],
            recorded["standalone"],
            tuple(recorded["deselect"]),
        )
        rows.extend(classify(run, outcome)[0])
    return rows


def run_lightning(options: argparse.Namespace) -> int:
    """Run the TPU tests of a Lightning checkout, print the table; 1 if a row gates, else 0."""
    if options.reclassify:
        return finish(
            [row for logs in options.reclassify for row in reclassify(logs)], options.json
        )
    if options.checkout is None:
        print("xlasim lightning: give a Lightning checkout (or --reclassify LOGS)", file=sys.stderr)
        return 2
    source = tests_dir(options.checkout.resolve())
    slice = Slice(options.devices, options.processes, options.topology)
    with scratch_space("lightning", options.logs) as (scratch, logs):
        # A copy: Lightning's tests check that they leave nothing behind in tests/, and the
        # checkout stays untouched by whatever they write next to themselves.
        tests = scratch / "tests"
        shutil.copytree(source, tests, ignore=shutil.ignore_patterns("__pycache__"))
        files = discover(tests, options.suite, options.select)
        if not files:
            print(f"xlasim lightning: no RunIf(tpu=True) tests under {source}", file=sys.stderr)
            return 2
        rows = run_jobs(
            files,
            lambda test_file: test_file.rel,
            lambda test_file: run_file(test_file, slice, options.timeout, logs),
        )
    return finish(rows, options.json)


__all__ = ["Row", "add_arguments", "run_lightning"]
