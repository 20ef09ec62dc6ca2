"""Running Lightning's tests under `pytest --xla-devices=N`, one bounded subprocess at a time.

A fresh process per file because the device count is fixed once torch_xla's runtime starts, and
a fresh process per `standalone=True` test because that is what Lightning asks of those tests
(its CI runs each in a process of its own, with `PL_RUN_STANDALONE_TESTS=1`). The child leads
its own process group, killed as a whole at the timeout, so the runner never hangs on a test nor
leaves one running. Lightning's own selection does the rest: `PL_RUN_TPU_TESTS=1` keeps only
`RunIf(tpu=True)` tests (its conftest), and whether the TPU gate opens is left to Lightning's
`XLAAccelerator.is_available()`, never forced.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from ..runners.execution import (
    Outcome,
    RunFiles,
    Slice,
    child_environment,
    run_recorded,
)
from ..runners.probe_names import PROGRESS_ENV, probed_pytest_options

#: Lightning's switches (tests/tests_pytorch/conftest.py, tests/tests_fabric/conftest.py).
TPU_TESTS_ENV = "PL_RUN_TPU_TESTS"
STANDALONE_TESTS_ENV = "PL_RUN_STANDALONE_TESTS"


@dataclass(frozen=True)
class LightningJob:
    """One pytest process: a file (`standalone=False`: its tests that may share a process) or a
    single standalone test id; `deselect`: ids not to run (tests that crashed the process)."""

    tests: Path
    target: str
    standalone: bool
    deselect: tuple[str, ...] = ()

    @property
    def slug(self) -> str:
        name = self.target.replace("/", "__").replace("::", "--")
        return "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:150]


def execute(run: LightningJob, slice: Slice, timeout: float, workdir: Path) -> Outcome:
    """Run `run` on the emulated `slice` from `run.tests` (pytest's rootdir); its output, junit
    file and progress file go to `workdir`, with a record to classify it again from.

    Args:
        run: a file's shared-process tests, or one standalone test.
        slice: the emulated slice.
        timeout: seconds before the run's process group is killed.
        workdir: where its files go, made if missing; an earlier run's reports and record in
            it are removed first.
    """
    files = RunFiles.of(workdir).fresh()
    (workdir / RECORD).unlink(missing_ok=True)
    outcome = run_recorded(
        command(run, slice, files.junit),
        env=environment(run, timeout, files.progress),
        files=files,
        timeout=timeout,
        cwd=run.tests,
    )
    record = {"run": dataclasses.asdict(run), "status": outcome.status, "seconds": outcome.seconds}
    (workdir / RECORD).write_text(json.dumps({**record, "timeout": timeout}, default=str))
    return outcome


#: What `execute` leaves in a run's directory besides the output and junit: enough to classify
#: the run again later (`xlasim lightning --reclassify LOGS`) without running it again.
RECORD = "run.json"


def load(workdir: Path) -> Outcome:
    """The outcome of the run recorded in `workdir`."""
    record = json.loads((workdir / RECORD).read_text())
    return RunFiles.of(workdir).outcome(record["status"], record["seconds"], record["timeout"])


def command(run: LightningJob, slice: Slice, junit: Path) -> list[str]:
    """The pytest command line of `run`: xlasim's plugin on the emulated slice, Lightning's
    `tests/` as rootdir, and the probe plugin recording each test.

    Args:
        run: the file or standalone test to give pytest, and the tests left out.
        slice: the emulated slice, as the plugin's options.
        junit: the junit file pytest writes.
    """
    return [
        sys.executable,
        "-m",
        "pytest",
        *slice.pytest_options(),
        run.target,
        f"--rootdir={run.tests}",
        *probed_pytest_options(junit, run.deselect),
    ]


def environment(run: LightningJob, timeout: float, progress: Path) -> dict[str, str]:
    """The environment of `run`: Lightning's switch that keeps only its TPU tests, and its
    standalone switch set for a standalone test only (a caller's is dropped).

    Args:
        run: the file or standalone test to run.
        timeout: the run's seconds, which bound a collective's wait (`child_environment`).
        progress: where the probe plugin writes the ids of the tests that started.
    """
    env = child_environment(timeout)
    env.pop(STANDALONE_TESTS_ENV, None)
    env[TPU_TESTS_ENV] = "1"
    if run.standalone:
        env[STANDALONE_TESTS_ENV] = "1"
    env[PROGRESS_ENV] = str(progress)
    return env
