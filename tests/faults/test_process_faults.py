"""Faults that end or interrupt a process (a rank's os._exit / os.abort, Ctrl-C caught or not,
another slice asked for after the first), each topology in a fresh Python process of its own:
what the launching process reports, that its world serves the next run, and that it leaves no
process, directory or abort behind. One process per topology runs every step in order
(`scripts/process_faults.py`), so the topology's start-up is paid once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from procs import ABORT_SIGNS, alive, descendants
from topologies import SHAPES, params, topology

from xlasim.ranks.threads import CLOSE_GRACE_S
from xlasim.ranks.world import RELEASE_GRACE_S

SCRIPT = Path(__file__).parent / "scripts" / "process_faults.py"
STEPS = ["exit", "rerun", "abort", "rerun", "sigint-caught", "rerun", "reemulate"]
#: Start-up (imports, zygote, workers) plus every step, on a loaded 2-core machine.
SCRIPT_BOUND_S = 150.0
#: From the uncaught Ctrl-C to the end of the process and of every process below it: the
#: release grace, then the exit's wait for a rank stuck in user code (threads mode: it must not
#: be inside XLA's C++ code when the interpreter finalizes), on a loaded machine.
EXIT_BOUND_S = RELEASE_GRACE_S + CLOSE_GRACE_S + 9.0


class Outcome:
    """What one topology's script printed, how it ended, and what it left."""

    def __init__(self, steps, returncode, stderr, exit_seconds, left_processes, left_files):
        self.steps = steps
        self.returncode = returncode
        self.stderr = stderr
        self.exit_seconds = exit_seconds
        self.left_processes = left_processes
        self.left_files = left_files

    def step(self, name: str, occurrence: int = 0) -> dict:
        return [s for s in self.steps if s["step"] == name][occurrence]


def _run(name: str, tmp: Path) -> Outcome:
    devices, processes, hosts = SHAPES[name]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PJRT_", "CPU_NUM"))}
    env.update(TMPDIR=str(tmp), PYTHONPATH=os.pathsep.join(sys.path))
    args = [sys.executable, str(SCRIPT), str(devices), str(processes), str(hosts)]
    process = subprocess.Popen(
        [*args, *STEPS, "sigint-uncaught"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,  # its Ctrl-C goes to its own group, not to pytest's
        text=True,
    )
    seen: set[int] = set()
    deadline = time.monotonic() + SCRIPT_BOUND_S
    while process.poll() is None and time.monotonic() < deadline:
        seen |= descendants(process.pid)
        time.sleep(0.1)
    ended = time.time()
    if process.poll() is None:
        os.killpg(process.pid, 9)
    stdout, stderr = process.communicate(timeout=30)
    time.sleep(1.0)  # what is left one second after the end
    steps = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    sent = [s for s in steps if s["step"] == "sigint-uncaught-sent"]
    exit_seconds = ended - sent[0]["time"] if sent else None
    return Outcome(
        steps, process.returncode, stderr, exit_seconds, alive(seen), list(tmp.iterdir())
    )


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    cache: dict[str, Outcome] = {}

    def outcome(name: str) -> Outcome:
        if name not in cache:
            cache[name] = _run(name, tmp_path_factory.mktemp(f"tmp-{name}"))
        return cache[name]

    return outcome


SLOW = params(slow=("hosts",))


@pytest.mark.parametrize("name", SLOW)
@pytest.mark.parametrize("how, call", [("exit", "os._exit(7)"), ("abort", "os.abort()")])
def test_a_rank_that_ends_its_process_is_named_and_the_world_serves_on(outcomes, name, how, call):
    outcome = outcomes(name)
    step = outcome.step(how)
    assert step["seconds"] < 10, step
    if name == "threads":
        assert f"rank 1 called {call}" in step["error"], step
        assert "RankExitError" in step["error"], step
    else:
        ended = "exited with code 7" if how == "exit" else "was killed by SIGABRT"
        worker = topology(name).process_of(1)
        ranks = "rank 1" if name == "processes" else "ranks 0-1"
        assert f"worker process {worker} ({ranks}) {ended}" in step["error"], step
        # A crash of a process of several rank threads names torch_xla's fallback-counter race.
        hinted = how == "abort" and name == "hosts"
        assert ("first CPU fallback of an op" in step["error"]) == hinted, step
        assert "wait in all_reduce" in step["error"], step  # where the other ranks were
    rerun = outcome.step("rerun", 0 if how == "exit" else 1)
    assert rerun["results"] == [float(SHAPES[name][0])] * SHAPES[name][0]


@pytest.mark.parametrize("name", SLOW)
def test_ctrl_c_caught_during_a_collective_leaves_the_world_serving(outcomes, name):
    outcome = outcomes(name)
    assert outcome.step("sigint-caught")["error"] == "KeyboardInterrupt"
    assert outcome.step("sigint-caught")["seconds"] < 5
    rerun = outcome.step("rerun", 2)
    assert rerun["results"] == [float(SHAPES[name][0])] * SHAPES[name][0]
    assert rerun["seconds"] < 10


@pytest.mark.parametrize("name", SLOW)
def test_ctrl_c_uncaught_ends_the_process_promptly_with_every_worker(outcomes, name):
    outcome = outcomes(name)
    assert outcome.returncode == 130 or outcome.returncode == -2, outcome.stderr[-2000:]
    assert outcome.exit_seconds is not None and outcome.exit_seconds < EXIT_BOUND_S
    assert outcome.left_processes == set()
    assert not any(sign in outcome.stderr for sign in ABORT_SIGNS), outcome.stderr[-2000:]


@pytest.mark.parametrize("name", SLOW)
def test_another_slice_after_the_first_is_refused(outcomes, name):
    error = outcomes(name).step("reemulate")["error"]
    assert error.startswith("RuntimeAlreadyStartedError: emulation already started as"), error


@pytest.mark.parametrize("name", SLOW)
def test_no_temporary_directory_is_left(outcomes, name):
    assert outcomes(name).left_files == []
