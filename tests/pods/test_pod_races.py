"""Race detection on a pod of 2 machines (docs/races.md, "Pods"), each a network namespace:
every machine's synchronisations and file accesses meet at the launch's end, so a race between
ranks of two machines is reported on both, as one machine reports it for the same program,
naming the machines; an ordered program reports nothing. A schedule is refused on a pod before
any rank starts.

Slow (each test starts xlasim on several machines): `-m slow`.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from fixtures.namespaces import TWO_HOSTS, XLASIM_RUN, wait_succeeded

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "scripts" / "races.py"
TOKEN = "pod-race-token"
PORT = 29760
RUN_BOUND_S = 300


def _pod(machines, tmp_path: Path, *arguments: str) -> list[subprocess.Popen]:
    pod = machines(2)
    return [
        pod.start(
            rank,
            [
                *XLASIM_RUN,
                *TWO_HOSTS,
                *("--machines", "2", "--machine-rank", str(rank), "--token", TOKEN),
                *("--rendezvous", f"{pod.address(0)}:{PORT}"),
                *arguments,
            ],
            tmp_path / f"m{rank}",
            XLASIM_TIMEOUT="60",
        )
        for rank in range(2)
    ]


def _finished(process: subprocess.Popen, output: Path) -> tuple[int, str]:
    try:
        process.wait(RUN_BOUND_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{output} did not finish within {RUN_BOUND_S} s")
    return process.returncode, Path(f"{output}.err").read_text()


def _race_lines(err: str) -> list[str]:
    """The report's races: each section's heading and ranks, without the count of pairs."""
    return [
        line for line in err.splitlines() if re.match(r"(race \d+: |  rank \d |      at )", line)
    ]


def test_a_race_between_machines_is_reported_as_on_one_machine(machines, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PYTEST_"))}
    one = subprocess.run(
        [*XLASIM_RUN, *TWO_HOSTS, "--races", str(SCRIPT), "unordered", str(shared)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_BOUND_S,
    )
    assert one.returncode != 0 and "RaceError" in one.stderr, one.stderr[-3000:]
    expected = _race_lines(one.stderr)
    assert any("rank 0 (host 0): write" in line for line in expected), one.stderr[-3000:]
    assert any("rank 3 (host 1): exists" in line for line in expected), one.stderr[-3000:]
    (shared / "written-by-rank-0").unlink()

    started = _pod(machines, tmp_path, "--races", str(SCRIPT), "unordered", str(shared))
    for rank, process in enumerate(started):
        status, err = _finished(process, tmp_path / f"m{rank}")
        assert status != 0 and "RaceError" in err, err[-3000:]
        lines = _race_lines(err)
        assert any("rank 0 (host 0, machine 0): write" in line for line in lines), err[-3000:]
        assert any("rank 3 (host 1, machine 1): exists" in line for line in lines), err[-3000:]
        assert [re.sub(r", machine \d", "", line) for line in lines] == expected


def test_a_rendezvous_between_machines_orders_the_write_and_the_read(machines, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    started = _pod(machines, tmp_path, "--races", str(SCRIPT), "ordered", str(shared))
    for rank, process in enumerate(started):
        wait_succeeded(process, tmp_path / f"m{rank}", RUN_BOUND_S)
    assert "rank 3 read weights" in (tmp_path / "m1.out").read_text()


def test_a_schedule_is_refused_on_a_pod_before_any_rank_starts(tmp_path):
    refused = subprocess.run(
        [
            *XLASIM_RUN,
            *TWO_HOSTS,
            *("--machines", "2", "--machine-rank", "0", "--schedules", "3"),
            *("--rendezvous", "127.0.0.1:29761", str(SCRIPT), "ordered", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        timeout=RUN_BOUND_S,
    )
    assert refused.returncode == 2
    assert "--schedules is refused on a pod of several machines (--machines)" in refused.stderr
    assert "rank" not in refused.stdout
