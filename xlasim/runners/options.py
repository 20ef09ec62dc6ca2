"""The options every upstream-suite runner takes (`xlasim conformance`, `lightning`,
`huggingface`): the slice, each run's time bound, a selection, and where results go."""

from __future__ import annotations

import argparse
from pathlib import Path


def add_runner_options(
    parser: argparse.ArgumentParser, *, timeout: float, select: str = "only files containing it"
) -> None:
    """Add `--devices`, `--processes`, `--timeout`, `-k`, `--json` and `--logs` to `parser`.

    Args:
        parser: the subcommand's parser.
        timeout: the default of `--timeout`, seconds each run may take before it is killed.
        select: what `-k SUBSTRING` keeps, for the help text.
    """
    parser.add_argument("--devices", type=int, metavar="N", default=8, help="emulated cores")
    parser.add_argument(
        "--processes",
        type=int,
        metavar="P",
        default=None,
        help="worker processes holding the cores (default: xlasim's; 1: every core a thread)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        default=timeout,
        help=f"seconds each run may take before it is killed (default {timeout:g})",
    )
    parser.add_argument("-k", dest="select", metavar="SUBSTRING", default=None, help=select)
    parser.add_argument("--json", type=Path, metavar="FILE", default=None, help="rows as JSON")
    parser.add_argument(
        "--logs", type=Path, metavar="DIR", default=None, help="keep every run's output under DIR"
    )
