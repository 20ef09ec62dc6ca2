"""A process with an emulated world that forks: the child either runs its own world or fails at
once naming the fork, never waits for ranks or a runtime that stayed in the parent
(`xlasim/base/forks.py`, `xlasim/ranks/warm_world.py`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

PROGRAM = Path(__file__).with_name("fork_program.py")


def run_program() -> dict:
    done = subprocess.run(
        [sys.executable, str(PROGRAM)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def test_a_fork_runs_its_own_world_before_the_runtime_starts_and_fails_naming_it_after():
    """torch_xla's pjrt/test_runtime_tpu.py forks ProcessPoolExecutor children from the test
    process. A started world whose ranks have not run leaves the runtime unstarted (as a TPU
    VM's test process is), so a child launches on a world of its own; after a launch the
    parent's runtime has started, and the child's launch and sync fail at once with the cause
    and both processes named (natively such a child hangs in torch_xla's native code)."""
    result = run_program()
    assert result["started_with_world"] is False
    assert result["pickles_by_reference"] is True  # ProcessPoolExecutor.submit(xm.function)
    assert result["before"]["launch"]["outcome"] == ["returned", {"0": 2.0, "1": 4.0}]
    assert result["parent_launch"] == {"0": 2.0, "1": 4.0}
    for what, said in (("launch", "a launch"), ("sync", "a graph execution")):
        kind, message = result["after"][what]["outcome"]
        assert kind == "raised", (what, kind, message)
        assert message.startswith(f"RuntimeAlreadyStartedError: {said}"), message
        assert f"forked from process {result['pid']}" in message
        assert "XLA runtime was already initialized" in message
        assert result["after"][what]["seconds"] < 30, result["after"][what]
