"""Running a measuring process with a bound on its time, keeping whatever it reported.

Every measure runs in a child process (the XLA device count is fixed per process, gloo needs a
process per rank, pytest runs are what is measured). A child runs in a session of its own, so
when it overruns its bound, it and every process it spawned (gloo ranks) are killed by that
one process-group id, and the records it already printed are kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
STDERR_TAIL_LINES = 15


@dataclass
class Finished:
    """What a bounded child left: its output, exit status, wall time, and whether it overran."""

    stdout: str
    stderr: str
    returncode: int
    seconds: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out

    def failure(self) -> str:
        """A short account of why the child did not finish cleanly (empty when it did)."""
        if self.ok:
            return ""
        why = "timed out" if self.timed_out else f"exited {self.returncode}"
        tail = "\n".join(self.stderr.strip().splitlines()[-STDERR_TAIL_LINES:])
        return f"{why} after {self.seconds:.0f} s\n{tail}"


def run_bounded(
    command: list[str], timeout: float, cwd: Path | None = None, env: dict | None = None
) -> Finished:
    """Run `command`, killing its whole process group if it takes longer than `timeout`."""
    began = time.perf_counter()
    child = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = child.communicate(timeout=timeout)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        stdout, stderr = child.communicate()
        timed_out = True
    return Finished(stdout, stderr, child.returncode, time.perf_counter() - began, timed_out)


def run_script(script: str, arguments: list[str], timeout: float) -> Finished:
    """Run one of this directory's worker scripts with the current interpreter."""
    return run_bounded([sys.executable, str(HERE / script), *arguments], timeout)
