"""Running a runner's jobs: one after another with a line of progress each, in a scratch
directory; a pytest job whose process a test killed, again without that test.

Every runner (torch_xla's, Lightning's, Hugging Face's) walks its jobs this way; what a job is,
how it runs and how its output becomes rows is the runner's own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from .rows import Row
from .table import print_progress


class Deselecting(Protocol):
    """A job that can run without some of its tests (a frozen dataclass)."""

    @property
    def deselect(self) -> tuple[str, ...]: ...


JobT = TypeVar("JobT")
DeselectingT = TypeVar("DeselectingT", bound=Deselecting)


def run_jobs(
    jobs: Sequence[JobT], label: Callable[[JobT], str], run: Callable[[JobT], list[Row]]
) -> list[Row]:
    """The rows of every job, run in order; each announced on stderr as it starts and its rows
    printed as it ends (the table comes at the end).

    Args:
        jobs: what to run.
        label: a job's name in the progress line.
        run: runs one job and gives its rows.
    """
    rows: list[Row] = []
    for number, job in enumerate(jobs, 1):
        print(f"[{number}/{len(jobs)}] {label(job)} ...", file=sys.stderr, flush=True)
        found = run(job)
        print_progress(found)
        rows.extend(found)
    return rows


def run_without_crashes(
    job: DeselectingT, timeout: float, attempt: Callable[[DeselectingT, float], str | None]
) -> None:
    """Run `job`; when a test killed its process (XLA aborts on a collective it cannot
    complete), run it again without that test, within the same time budget, so one crashing
    test does not hide the results of the others.

    Args:
        job: the first run; the next ones are it with more tests deselected.
        timeout: seconds for all of the runs together.
        attempt: runs a job within the seconds left, keeps its rows, and gives the id of the
            test that crashed its process (None: nothing to run again).
    """
    deadline = time.monotonic() + timeout
    while True:
        crashed = attempt(job, timeout)
        timeout = deadline - time.monotonic()
        if crashed is None or crashed in job.deselect or timeout <= 0:
            return
        job = dataclasses.replace(job, deselect=(*job.deselect, crashed))


@contextlib.contextmanager
def scratch_space(runner: str, logs: Path | None) -> Iterator[tuple[Path, Path]]:
    """A scratch directory for one invocation of `runner`, removed at the end, and where its
    runs' logs go: `logs` (`--logs`, kept) or the scratch directory's `logs/`.

    Args:
        runner: the runner's name (`conformance`, `lightning`...), in the directory's prefix.
        logs: the directory `--logs` named, where logs are kept after the run; None: they go
            in the scratch directory and are removed with it.
    """
    with tempfile.TemporaryDirectory(prefix=f"xlasim-{runner}-") as scratch:
        yield Path(scratch), logs.resolve() if logs else Path(scratch) / "logs"
