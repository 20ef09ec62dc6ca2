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
from pathlib import Path

from ..runners.execution import Slice
from ..runners.jobs import run_jobs, scratch_space
from ..runners.options import add_runner_options
from ..runners.rows import Row
from ..runners.table import finish
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
    with scratch_space("huggingface", options.logs) as (_, logs):
        rows = run_jobs(
            jobs,
            lambda job: job.id,
            lambda job: classify(job, execute(job, slice, options.timeout, logs / job.slug)),
        )
    return finish(rows, options.json)


__all__ = ["Row", "add_arguments", "run_huggingface"]
