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
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from ..conformance.execution import _FOREIGN_ENV, Outcome, probed_pytest_options, run_bounded
from ..conformance.probe_names import PROGRESS_ENV

#: Lightning's switches (tests/tests_pytorch/conftest.py, tests/tests_fabric/conftest.py).
TPU_TESTS_ENV = "PL_RUN_TPU_TESTS"
STANDALONE_TESTS_ENV = "PL_RUN_STANDALONE_TESTS"


@dataclass(frozen=True)
class Slice:
    """The emulated slice every run gets: a core count (and the worker processes holding them;
    None: xlasim's default), or a named topology (`xlasim topologies`) instead."""

    devices: int = 8
    processes: int | None = None
    topology: str | None = None

    def pytest_options(self) -> list[str]:
        if self.topology:
            return [f"--xla-topology={self.topology}"]
        processes = [] if self.processes is None else [f"--xla-processes={self.processes}"]
        return [f"--xla-devices={self.devices}", *processes]


@dataclass(frozen=True)
class Run:
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


def execute(run: Run, slice: Slice, timeout: float, workdir: Path) -> Outcome:
    """Run `run` on the emulated `slice` from `run.tests` (pytest's rootdir); its output, junit
    file and progress file go to `workdir`."""
    workdir.mkdir(parents=True, exist_ok=True)
    log, junit, progress = workdir / "output.log", workdir / "junit.xml", workdir / "started.txt"
    for stale in (junit, progress, workdir / RECORD):
        stale.unlink(missing_ok=True)
    started = time.monotonic()
    status = run_bounded(
        command(run, slice, junit),
        cwd=run.tests,
        env=environment(run, timeout, progress),
        log=log,
        timeout=timeout,
    )
    seconds = time.monotonic() - started
    record = {"run": dataclasses.asdict(run), "status": status, "seconds": seconds}
    (workdir / RECORD).write_text(json.dumps({**record, "timeout": timeout}, default=str))
    return load(workdir)


#: What `execute` leaves in a run's directory besides the output and junit: enough to classify
#: the run again later (`xlasim lightning --reclassify LOGS`) without running it again.
RECORD = "run.json"


def load(workdir: Path) -> Outcome:
    """The outcome of the run recorded in `workdir`."""
    record = json.loads((workdir / RECORD).read_text())
    log, junit, progress = workdir / "output.log", workdir / "junit.xml", workdir / "started.txt"
    return Outcome(
        status=record["status"],
        seconds=record["seconds"],
        timeout=record["timeout"],
        output=log.read_text(encoding="utf-8", errors="replace"),
        report=None,
        junit=junit if junit.exists() else None,
        started=progress.read_text().splitlines() if progress.exists() else [],
        log=log,
    )


def command(run: Run, slice: Slice, junit: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        *slice.pytest_options(),
        run.target,
        f"--rootdir={run.tests}",
        *probed_pytest_options(junit, run.deselect),
    ]


def environment(run: Run, timeout: float, progress: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV}
    env.pop(STANDALONE_TESTS_ENV, None)
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    env[TPU_TESTS_ENV] = "1"
    if run.standalone:
        env[STANDALONE_TESTS_ENV] = "1"
    # A collective's wait includes the peers' first compiles; half the budget still reports a
    # real hang, with every rank's stack, before the process is killed.
    env.setdefault("XLASIM_TIMEOUT", f"{max(timeout / 2, 60):.0f}")
    env[PROGRESS_ENV] = str(progress)
    return env
