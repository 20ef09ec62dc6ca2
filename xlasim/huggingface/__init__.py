"""The Hugging Face runner: accelerate's and transformers' TPU tests and scripts, unmodified, on
emulated cores.

    python -m xlasim huggingface PATH/TO/accelerate-or-transformers [--devices 8]
                        [--processes P] [--timeout S] [-k SUBSTRING] [--json FILE] [--logs DIR]

`discovery` finds what their TPU CI runs and how it is launched (`accelerate launch --tpu`,
transformers' `xla_spawn.py`, pytest for tests gated on a TPU); `execution` runs each job in a
bounded subprocess on the emulated slice with the hub offline; `classify` gives every non-pass a
class (a finding of `findings` documented in docs/huggingface.md, "needs hub", or an unexplained
failure). The exit status is 1 when a row is unexplained (failed, crashed, timed out, or ran no
checks), so the command can gate CI. accelerate and transformers are not dependencies of
xlasim: install the extra `xlasim[huggingface]`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from ..conformance.classify import Row
from ..conformance.execution import Slice
from ..conformance.runner_options import add_runner_options
from ..conformance.table import finish, print_progress
from .classify import classify
from .discovery import discover
from .execution import execute

DEFAULT_TIMEOUT_S = 900.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `huggingface` subcommand's options (the parser is built by `xlasim.cli`)."""
    parser.add_argument(
        "checkout", type=Path, help="an accelerate or transformers checkout (holding src/)"
    )
    add_runner_options(parser, timeout=DEFAULT_TIMEOUT_S, select="only jobs containing it")


def run_huggingface(options: argparse.Namespace) -> int:
    """Run the TPU jobs of a Hugging Face checkout, print the table; 1 if a row gates, else 0."""
    checkout = options.checkout.resolve()
    try:
        jobs = discover(checkout, options.select)
    except FileNotFoundError as error:
        print(f"xlasim huggingface: {error}", file=sys.stderr)
        return 2
    if not jobs:
        print(f"xlasim huggingface: no TPU tests or scripts under {checkout}", file=sys.stderr)
        return 2
    slice = Slice(options.devices, options.processes)
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="xlasim-huggingface-") as scratch:
        logs = options.logs.resolve() if options.logs else Path(scratch)
        for number, job in enumerate(jobs, 1):
            print(f"[{number}/{len(jobs)}] {job.id} ...", file=sys.stderr, flush=True)
            found = classify(job, execute(job, slice, options.timeout, logs / job.slug))
            print_progress(found)
            rows.extend(found)
    return finish(rows, options.json)


__all__ = ["Row", "add_arguments", "run_huggingface"]
