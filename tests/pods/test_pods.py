"""Pods across machines (docs/pods.md), each machine a network namespace made by the test:
`xlasim run --machines M --machine-rank K --rendezvous HOST:PORT --token T` on every machine.

- a program of every collective on 2 machines prints what one machine prints, bit for bit;
- a machine killed mid-collective is named by the other within the bound, nothing left running;
- every listener binds the machine's own address (or loopback); a host without the token:
  test_pod_members.py.

Slow (each test starts xlasim on several machines: ~30-60 s on 2 loaded cores): `-m slow`.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from fixtures.namespaces import Machines, wait_succeeded
from fixtures.pod_runs import XLASIM, pod_options, rank_lines, start_here

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "scripts" / "collectives.py"
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
    return [*SLICE, *pod_options(machines, rank, count, PORT, token)]


def _one_machine(tmp_path: Path) -> subprocess.Popen:
    """The same slice on one machine (this one), the reference."""
    return start_here(
        [*XLASIM, *SLICE, str(SCRIPT)], tmp_path / "one", XLASIM_TIMEOUT=str(TIMEOUT_S)
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
    one = rank_lines(tmp_path / "one.out")
    two = rank_lines(tmp_path / "m0.out", tmp_path / "m1.out")
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
