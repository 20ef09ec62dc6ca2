"""Running one job of an upstream suite in its own subprocess, bounded by a timeout.

A fresh process per job because the device count is fixed once torch_xla's runtime starts,
and because a test that hangs or crashes must take nothing else down. The child leads its own
process group, so a timeout (or a job that leaves children behind) is cleaned up by killing
that group: the runner never hangs on a child, nor leaves one running. The group is killed
while its leader is still unreaped (a zombie at worst), so its id cannot have been reused by
someone else's process. What each runner runs (its command line, its environment) is its own;
the slice, the files a run leaves, its outcome and the bounded child are shared here.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

#: Variables of the caller that would pick another platform or slice than the one asked for.
FOREIGN_ENV = (
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
    """The emulated slice every run gets: a core count and the worker processes holding them
    (None: xlasim's default), or a named topology (`xlasim topologies`) instead."""

    devices: int = 8
    processes: int | None = None
    topology: str | None = None

    def pytest_options(self) -> list[str]:
        """This slice as options of xlasim's pytest plugin."""
        if self.topology:
            return [f"--xla-topology={self.topology}"]
        processes = [] if self.processes is None else [f"--xla-processes={self.processes}"]
        return [f"--xla-devices={self.devices}", *processes]

    def run_options(self) -> list[str]:
        """This slice as options of `xlasim run`."""
        return [f"--{option[len('--xla-') :]}" for option in self.pytest_options()]


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
    (the ids of the tests that started), all in its working directory (`RunFiles.of`)."""

    workdir: Path
    log: Path
    report: Path
    junit: Path
    progress: Path

    @classmethod
    def of(cls, workdir: Path) -> RunFiles:
        """The files of the run whose working directory is `workdir`."""
        names = ("output.log", "run-report.json", "junit.xml", "started.txt")
        return cls(workdir, *(workdir / name for name in names))

    def outcome(self, status: int | None, seconds: float, timeout: float) -> Outcome:
        """What the run that ended with `status` after `seconds` (of `timeout`) left here.

        Args:
            status: the child's exit status (negative: the signal that killed it), None when
                it was killed at its timeout.
            seconds: wall-clock seconds the run took.
            timeout: the seconds it was allowed, for the reason a timed-out row gives.
        """
        return Outcome(
            status=status,
            seconds=seconds,
            timeout=timeout,
            output=self.log.read_text(encoding="utf-8", errors="replace"),
            report=json.loads(self.report.read_text()) if self.report.exists() else None,
            junit=self.junit if self.junit.exists() else None,
            started=self.progress.read_text().splitlines() if self.progress.exists() else [],
            log=self.log,
        )

    def fresh(self) -> RunFiles:
        """These files with the directory made and an earlier run's reports removed."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for stale in (self.report, self.junit, self.progress):
            stale.unlink(missing_ok=True)
        return self


def run_recorded(
    command: list[str],
    *,
    env: dict[str, str],
    files: RunFiles,
    timeout: float,
    cwd: Path | None = None,
) -> Outcome:
    """Run `command` bounded by `timeout` seconds; what it left in `files`.

    Args:
        command: the child's argument list.
        env: its whole environment.
        files: where its output and reports go.
        timeout: seconds before its process group is killed.
        cwd: its working directory (default: `files.workdir`).
    """
    started = time.monotonic()
    status = run_bounded(command, cwd=cwd or files.workdir, env=env, log=files.log, timeout=timeout)
    return files.outcome(status, time.monotonic() - started, timeout)


def child_environment(timeout: float) -> dict[str, str]:
    """The environment every run starts from: the caller's, without what would pick another
    slice, unbuffered, with Python's fault handler, and a collective's bound that fits
    `timeout`."""
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
    # A collective's wait includes the other ranks' compiles, minutes for a ResNet on a small
    # machine; xlasim's 60 s default would report those as hangs. Half the run's budget still
    # reports a real hang, with every rank's stack, before the run is killed.
    env.setdefault("XLASIM_TIMEOUT", f"{max(timeout / 2, 60):.0f}")
    return env


def run_bounded(
    command: list[str], *, cwd: Path, env: dict[str, str], log: Path, timeout: float
) -> int | None:
    """Run `command` in a session of its own with its output in `log`; its exit status, or
    None when it ran past `timeout` seconds. Its whole process group is killed at the end
    either way: what a test started (workers, servers) must not outlive the run.

    Args:
        command: the child's argument list.
        cwd: its working directory.
        env: its whole environment (nothing of the caller's is added).
        log: the file its stdout and stderr go to, together; overwritten.
        timeout: wall-clock seconds before its process group is killed.
    """
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
