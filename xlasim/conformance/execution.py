"""Running one job in its own subprocess, bounded by a timeout.

A fresh process per file because the device count is fixed once torch_xla's runtime starts,
and because a test that hangs or crashes must take nothing else down. The child leads its own
process group, so a timeout (or a file that leaves children behind) is cleaned up by killing
that group: the runner never hangs on a child, nor leaves one running. The group is killed
while its leader is still unreaped (a zombie at worst), so its id cannot have been reused by
someone else's process.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .discovery import PYTEST, TORCHRUN, Job
from .expectations import FILE_ENV
from .probe_names import PROGRESS_ENV

#: Variables of the caller that would pick another platform or slice than the one asked for.
_FOREIGN_ENV = (
    "PJRT_DEVICE",
    "CPU_NUM_DEVICES",
    "XLASIM_DEVICES",
    "XLASIM_PROCESSES",
    "XLASIM_HOSTS",
    "XLASIM_TOPOLOGY",
    "XLASIM_BACKEND",
    "XLASIM_RUN_REPORT",
)


@dataclass(frozen=True)
class Slice:
    """The emulated slice every file runs on: cores, and the worker processes holding them
    (None: xlasim's default)."""

    devices: int
    processes: int | None = None


@dataclass(frozen=True)
class Outcome:
    """What came back from one job: exit status (None when killed at the timeout), the combined
    output, the script's run report (script mode), and in pytest mode the junit file and the
    ids of the tests that started (the last one was running if the process died)."""

    status: int | None
    seconds: float
    timeout: float
    output: str
    report: dict | None
    junit: Path | None
    started: list[str]
    log: Path

    @property
    def timed_out(self) -> bool:
        return self.status is None


@dataclass(frozen=True)
class RunFiles:
    """Where one run leaves its output, run report (script mode), junit file and progress file
    (the ids of the tests that started), all in its working directory."""

    workdir: Path

    @property
    def log(self) -> Path:
        return self.workdir / "output.log"

    @property
    def report(self) -> Path:
        return self.workdir / "run-report.json"

    @property
    def junit(self) -> Path:
        return self.workdir / "junit.xml"

    @property
    def progress(self) -> Path:
        return self.workdir / "started.txt"

    def fresh(self) -> RunFiles:
        """These files with the directory made and an earlier run's reports removed."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for stale in (self.report, self.junit, self.progress):
            stale.unlink(missing_ok=True)
        return self


def execute(
    job: Job, slice: Slice, timeout: float, workdir: Path, *, native: bool = False
) -> Outcome:
    """Run `job` on the emulated `slice` with `workdir` as its working directory (where
    anything the test writes to its current directory lands, with its output and reports);
    `native`: instead without xlasim, on one CPU device, as torch_xla's CPU CI runs it (the
    baseline a `tpu` suite row is compared with)."""
    files = RunFiles(workdir).fresh()
    return run_recorded(
        native_command(job, files.junit) if native else command(job, slice, files.junit),
        env=environment(job, timeout, files.report, files.progress, native=native),
        files=files,
        timeout=timeout,
    )


def run_recorded(
    command: list[str], *, env: dict[str, str], files: RunFiles, timeout: float
) -> Outcome:
    """Run `command` bounded by `timeout` seconds in `files.workdir`; what it left there."""
    started = time.monotonic()
    status = run_bounded(command, cwd=files.workdir, env=env, log=files.log, timeout=timeout)
    return Outcome(
        status=status,
        seconds=time.monotonic() - started,
        timeout=timeout,
        output=files.log.read_text(encoding="utf-8", errors="replace"),
        report=json.loads(files.report.read_text()) if files.report.exists() else None,
        junit=files.junit if files.junit.exists() else None,
        started=files.progress.read_text().splitlines() if files.progress.exists() else [],
        log=files.log,
    )


def command(job: Job, slice: Slice, junit: Path) -> list[str]:
    if job.mode == PYTEST:
        processes = [] if slice.processes is None else [f"--xla-processes={slice.processes}"]
        return [
            sys.executable,
            "-m",
            "pytest",
            f"--xla-devices={slice.devices}",
            *processes,
            job.target,
            f"--rootdir={job.root}",
            # Prepend, pytest's default: test/ is a package, so the checkout's root goes on
            # sys.path and a test module is `test.pjrt.test_x`, a name worker processes can
            # import to unpickle launched functions (importlib mode makes up names they
            # cannot). The checkout's torch_xla/ source folder does not shadow the installed
            # one: xlasim's plugin imports torch_xla before collection.
            "--import-mode=prepend",
            *probed_pytest_options(junit, job.deselect),
        ]
    return [
        sys.executable,
        "-m",
        "xlasim",
        "run",
        "--devices",
        str(slice.devices),
        *([] if slice.processes is None else ["--processes", str(slice.processes)]),
        *(["--torchrun"] if job.mode == TORCHRUN else []),
        str(job.path),
        *job.args,
    ]


def native_command(job: Job, junit: Path) -> list[str]:
    """`job` without xlasim: the file as a script, or under pytest without xlasim's plugin."""
    if job.mode != PYTEST:
        return [sys.executable, str(job.path), *job.args]
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:xlasim",
        # Imported before collection, as xlasim's plugin imports it: prepend mode puts the
        # checkout's root on sys.path, and its torch_xla/ source folder would shadow the
        # installed package.
        "-p",
        "torch_xla",
        job.target,
        f"--rootdir={job.root}",
        "--import-mode=prepend",
        *probed_pytest_options(junit, job.deselect),
    ]


def probed_pytest_options(junit: Path, deselect: Sequence[str]) -> list[str]:
    """The pytest options of a probed run: junit with every test's output, the probe plugin
    that records each test's launches and collectives, and the tests left out."""
    return [
        f"--junitxml={junit}",
        "-o",
        "junit_logging=all",
        "-o",
        "junit_family=xunit1",
        # sys, not fd: XLA's own log lines (the reason for an abort) reach the output.
        "--capture=sys",
        "-p",
        "no:cacheprovider",
        "-p",
        "xlasim.conformance.pytest_probe",
        *(f"--deselect={id}" for id in deselect),
    ]


def environment(
    job: Job, timeout: float, report: Path, progress: Path, *, native: bool = False
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _FOREIGN_ENV}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    env.update(FILE_ENV.get(job.rel, {}))
    devices = job.root / "pytorch_test_base.py"
    if devices.is_file():  # test/run_tests.sh exports it for every file
        env["TORCH_TEST_DEVICES"] = str(devices)  # torch's device-type tests get an XLA variant
    if native:
        env["PJRT_DEVICE"] = "CPU"  # and no CPU_NUM_DEVICES: one device
    # A collective's wait includes the other ranks' compiles, minutes for a ResNet on a small
    # machine; xlasim's 60 s default would report those as hangs. Half the file's budget still
    # reports a real hang, with every rank's stack, before the file is killed.
    env.setdefault("XLASIM_TIMEOUT", f"{max(timeout / 2, 60):.0f}")
    if job.mode == PYTEST:
        # Run as scripts, torch_xla's tests find their helpers (args_parse, distributed_util)
        # through sys.argv[0]; under pytest that is pytest's path, so put test/ on the path.
        # The file's own folder too, as for a script: test/spmd's files import their siblings.
        # And the checkout's examples/, which files find the same way (test_assume_pure.py,
        # dynamo/test_dynamo_dynamic_shape.py: `decoder_only_model`).
        examples = job.root.parent / "examples"
        paths = [str(job.root), str(job.path.parent), str(examples), env.get("PYTHONPATH")]
        env["PYTHONPATH"] = os.pathsep.join(filter(None, paths))
        env[PROGRESS_ENV] = str(progress)
    else:
        env["XLASIM_RUN_REPORT"] = str(report)
    return env


def run_bounded(
    command: list[str], *, cwd: Path, env: dict[str, str], log: Path, timeout: float
) -> int | None:
    """Run `command` in a session of its own with its output in `log`; its exit status, or
    None when it ran past `timeout` seconds. Its whole process group is killed at the end
    either way: what a test started (workers, servers) must not outlive the run."""
    with open(log, "wb") as out:
        child = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,
        )
        exited = _wait_unreaped(child, timeout)
        with contextlib.suppress(ProcessLookupError):  # the whole group is gone
            os.killpg(child.pid, signal.SIGKILL)
        return child.wait() if exited else None


def _wait_unreaped(child: subprocess.Popen, timeout: float) -> bool:
    """Whether `child` exited within `timeout` seconds; it is left unreaped (WNOWAIT)."""
    deadline = time.monotonic() + timeout
    while os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)
    return True
