"""Pods across machines (docs/pods.md), each machine a network namespace made by the test:
`xlasim run --machines M --machine-rank K --rendezvous HOST:PORT --token T` on every machine.

- a program of every collective on 2 machines prints what one machine prints, bit for bit;
- a machine killed mid-collective is named by the other within the bound, nothing left running;
- a machine with a wrong token and a connection that sends garbage are refused, and the pod's
  run is the same as without them; every listener binds the machine's own address (or loopback).

Slow (each test starts xlasim on several machines: ~30-60 s on 2 loaded cores): `-m slow`.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.namespaces import Machines, wait_succeeded

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "scripts" / "collectives.py"
XLASIM = [sys.executable, "-m", "xlasim", "run"]
#: 4 cores, a process each, on 2 emulated hosts: machine 0 holds host 0 (ranks 0-1), machine 1
#: host 1 (ranks 2-3).
SLICE = ["--devices", "4", "--processes", "4", "--hosts", "2"]
TOKEN = "pod-test-token"
PORT = 29750
RUN_BOUND_S = 300
#: The collective bound on the machines: a lost machine must be named well within it.
TIMEOUT_S = 60.0
#: What the surviving machine may take to name a killed one (the links break at once).
LOST_BOUND_S = 20.0
#: The collective bound of the silent-machine test, and what machine 0 may take to name the
#: silent one and exit: the bound, a supervisor poll and the exit.
SILENT_TIMEOUT_S = 10.0
SILENT_BOUND_S = SILENT_TIMEOUT_S + 15.0


def _pod_arguments(machines: Machines, rank: int, count: int, token: str = TOKEN) -> list[str]:
    return [
        *SLICE,
        "--machines",
        str(count),
        "--machine-rank",
        str(rank),
        "--rendezvous",
        f"{machines.address(0)}:{PORT}",
        "--token",
        token,
    ]


def _rank_lines(*outputs: Path) -> list[str]:
    lines = [line for out in outputs for line in out.read_text().splitlines()]
    return sorted(line for line in lines if line.startswith("rank "))


def _one_machine(tmp_path: Path) -> subprocess.Popen:
    """The same slice on one machine (this one), the reference."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PYTEST_"))}
    env["XLASIM_TIMEOUT"] = str(TIMEOUT_S)
    env.pop("CPU_NUM_DEVICES", None)
    with open(tmp_path / "one.out", "w") as out, open(tmp_path / "one.err", "w") as err:
        return subprocess.Popen(
            [*XLASIM, *SLICE, str(SCRIPT)], cwd=tmp_path, env=env, stdout=out, stderr=err
        )


def _start_pod(
    machines: Machines, tmp_path: Path, count: int, *script: str, timeout: float = TIMEOUT_S
) -> list:
    return [
        _start_machine(machines, tmp_path, rank, count, *script, timeout=timeout)
        for rank in range(count)
    ]


def _start_machine(
    machines: Machines,
    tmp_path: Path,
    rank: int,
    count: int,
    *script: str,
    timeout: float = TIMEOUT_S,
) -> subprocess.Popen:
    return machines.start(
        rank,
        [*XLASIM, *_pod_arguments(machines, rank, count), str(SCRIPT), *script],
        tmp_path / f"m{rank}",
        XLASIM_TIMEOUT=str(timeout),
    )


def _wait_until_stepping(started: list[subprocess.Popen], tmp_path: Path) -> None:
    """Wait until the pod's `forever` loop is well under way (machine 0 printed step 20)."""
    steps = tmp_path / "m0.out"
    deadline = time.monotonic() + RUN_BOUND_S
    while "step 20" not in steps.read_text():
        assert time.monotonic() < deadline, "the pod never got going"
        assert started[0].poll() is None, Path(f"{tmp_path}/m0.err").read_text()[-3000:]
        time.sleep(0.2)


def _named_within(process: subprocess.Popen, bound_s: float, what: str) -> float:
    """Seconds until machine 0 (`process`) ended, which it must within `bound_s` of `what`."""
    began = time.monotonic()
    try:
        process.wait(bound_s)
    except subprocess.TimeoutExpired:
        pytest.fail(f"machine 0 still ran {bound_s:g} s after {what}")
    return time.monotonic() - began


def _assert_nothing_left(pod: Machines, machine: int) -> None:
    deadline = time.monotonic() + 10
    while pod.pids(machine) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pod.pids(machine) == [], f"machine {machine} left processes running"


def test_two_machines_compute_what_one_machine_does_bit_for_bit(machines, tmp_path):
    pod = machines(2)
    reference = _one_machine(tmp_path)
    started = _start_pod(pod, tmp_path, 2)
    listening: list[set[str]] = [set(), set()]
    while any(p.poll() is None for p in started):
        for rank in range(2):
            listening[rank] |= pod.listeners(rank)
        time.sleep(0.2)
    for rank, process in enumerate(started):
        wait_succeeded(process, tmp_path / f"m{rank}", RUN_BOUND_S)
    wait_succeeded(reference, tmp_path / "one", RUN_BOUND_S)
    one = _rank_lines(tmp_path / "one.out")
    two = _rank_lines(tmp_path / "m0.out", tmp_path / "m1.out")
    assert len(one) == 2 * 4 * 14, one  # 2 launches x 4 ranks x 14 lines
    assert two == one
    # Machine 1's ranks are hosts 1's: the pod's identity, not a machine of its own.
    assert "rank 2: identity process 2 of 4, local 0, host 1" in two
    for rank in range(2):
        own = pod.address(rank)
        assert any(a.startswith(f"{own}:") for a in listening[rank]), listening[rank]
        outside = [a for a in listening[rank] if not a.startswith((f"{own}:", "127.0.0.1:"))]
        assert outside == [], f"machine {rank} listened outside its address: {outside}"


def test_a_machine_killed_mid_collective_is_named_by_the_other(machines, tmp_path):
    pod = machines(2)
    started = _start_pod(pod, tmp_path, 2, "forever")
    _wait_until_stepping(started, tmp_path)
    pod.kill(1)
    named_after = _named_within(started[0], LOST_BOUND_S, "machine 1 was killed")
    err = (tmp_path / "m0.err").read_text()
    assert started[0].returncode != 0
    assert "MachineLostError: machine 1 (hosts 1, ranks 2-3) was lost during a collective" in err
    assert named_after < LOST_BOUND_S
    _assert_nothing_left(pod, 0)


def test_a_silent_machine_is_named_by_the_other_within_the_collective_bound(machines, tmp_path):
    pod = machines(2)
    started = _start_pod(pod, tmp_path, 2, "forever", timeout=SILENT_TIMEOUT_S)
    _wait_until_stepping(started, tmp_path)
    pod.stop(1)  # alive, its links open, never sending again
    named_after = _named_within(started[0], SILENT_BOUND_S, "machine 1 went silent")
    err = (tmp_path / "m0.err").read_text()
    assert started[0].returncode != 0
    assert (
        "MachineLostError: machine 1 (hosts 1, ranks 2-3) did not answer a collective within "
        f"{SILENT_TIMEOUT_S:g} s"
    ) in err, err[-3000:]
    assert SILENT_TIMEOUT_S - 1 < named_after < SILENT_BOUND_S
    _assert_nothing_left(pod, 0)


def _failed_pod(machines, tmp_path: Path, mode: str) -> list[str]:
    """Run the script's `mode` on 2 machines, each expected to fail; their stderr."""
    started = _start_pod(machines(2), tmp_path, 2, mode)
    for rank, process in enumerate(started):
        try:
            process.wait(RUN_BOUND_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"machine {rank} did not finish within {RUN_BOUND_S} s")
        assert process.returncode != 0, f"machine {rank} passed"
    return [(tmp_path / f"m{rank}.err").read_text() for rank in range(2)]


def test_a_rank_that_raises_on_one_machine_is_named_on_the_other(machines, tmp_path):
    first, second = _failed_pod(machines, tmp_path, "raises")
    assert "ValueError: planted failure on rank 3" in second
    assert (
        "MachineLostError: machine 1 (hosts 1, ranks 2-3) failed during the run; this machine's "
        "ranks were released. It said: rank 3 raised ValueError: planted failure on rank 3"
    ) in first


def test_calls_that_differ_between_machines_are_a_mismatch_on_both(machines, tmp_path):
    for err in _failed_pod(machines, tmp_path, "mismatch"):
        assert "CollectiveMismatchError: ranks [0, 1, 2, 3] met at the same collective" in err
        assert "ranks 0-1: all_reduce(" in err and "tensors=[float32(4,)]" in err
        assert "ranks 2-3: all_reduce(" in err and "tensors=[float32(3,)]" in err
        assert "(on machine 0)" in err and "(on machine 1)" in err


def test_a_machine_that_never_joins_is_named_within_the_join_bound(machines, tmp_path):
    pod = machines(2)
    alone = pod.start(
        0,
        [*XLASIM, *_pod_arguments(pod, 0, 2), str(SCRIPT)],
        tmp_path / "m0",
        XLASIM_POD_JOIN_TIMEOUT="5",
    )
    alone.wait(RUN_BOUND_S)
    err = (tmp_path / "m0.err").read_text()
    assert alone.returncode != 0
    assert (
        f"PodJoinError: machines [1] of 2 never joined the rendezvous at {pod.address(0)}:{PORT} "
        "within 5 s"
    ) in err
    _assert_nothing_left(pod, 0)


def test_wrong_token_and_garbage_are_refused_and_the_pod_runs_on(machines, tmp_path):
    pod = machines(3)  # machine 2 is the intruder's
    reference = _one_machine(tmp_path)
    first = _start_machine(pod, tmp_path, 0, 2)
    intruder = pod.start(
        2,
        [*XLASIM, *_pod_arguments(pod, 1, 2, token="not-the-token"), str(SCRIPT)],
        tmp_path / "intruder",
        XLASIM_TIMEOUT=str(TIMEOUT_S),
    )
    intruder.wait(RUN_BOUND_S)
    intruder_err = (tmp_path / "intruder.err").read_text()
    assert intruder.returncode != 0
    assert "PodJoinError" in intruder_err and "does not know this pod's token" in intruder_err
    garbage = subprocess.run(
        ["ip", "netns", "exec", pod.names[2], sys.executable, "-c", _SEND_GARBAGE],
        env={**os.environ, "TARGET": f"{pod.address(0)}:{PORT}"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert garbage.returncode == 0, garbage.stderr
    second = _start_machine(pod, tmp_path, 1, 2)
    for rank, process in enumerate([first, second]):
        wait_succeeded(process, tmp_path / f"m{rank}", RUN_BOUND_S)
    wait_succeeded(reference, tmp_path / "one", RUN_BOUND_S)
    assert _rank_lines(tmp_path / "m0.out", tmp_path / "m1.out") == _rank_lines(
        tmp_path / "one.out"
    )
    assert (
        "refused join ticket 1: a machine claiming rank 1 showed a wrong token"
        in (tmp_path / "m0.err").read_text()
    )


#: A stray peer: connects to the rendezvous, sends random bytes, reads what comes back, leaves.
_SEND_GARBAGE = """
import os, socket, time
host, port = os.environ["TARGET"].rsplit(":", 1)
deadline = time.monotonic() + 50
while True:
    try:
        stray = socket.create_connection((host, int(port)), timeout=5)
        break
    except OSError:
        assert time.monotonic() < deadline, "the rendezvous never listened"
        time.sleep(0.2)
stray.sendall(os.urandom(4096) + b"\\x00" * 64)
stray.settimeout(2)
try:
    stray.recv(64)
except OSError:
    pass
stray.close()
"""
