"""torch_xla v2.9.0's mp collective scripts, unmodified, on a pod of 8 emulated hosts (a chip
each) spread over 4 machines in network namespaces: each passes on every machine, prints what
the same slice prints on one machine, and every machine counts the collectives one machine
counts (each machine's run report, `XLASIM_RUN_REPORT`): the scripts really met across machines.

Needs the torch_xla v2.9.0 checkout (`XLA_TEST_DIR`, default /work/upstream/xla-v2.9.0/test;
skips naming it otherwise) and namespaces. Slow: minutes (`-m slow`, CI step "pods, torch_xla").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.namespaces import Machines, unavailable, wait_succeeded

pytestmark = pytest.mark.slow

TEST_DIR = Path(os.environ.get("XLA_TEST_DIR", "/work/upstream/xla-v2.9.0/test"))
SCRIPTS = [
    "test_mp_all_gather.py",
    "test_mp_all_to_all.py",
    "test_mp_collective_permute.py",
    "test_mp_mesh_reduce.py",
    "test_mp_reduce_scatter.py",
    "test_mp_replication.py",
    "test_mp_collective_matmul.py",
]
MACHINES = 4
#: 8 hosts of one chip each (a process per chip): 2 hosts on each of the 4 machines.
SLICE = ["--devices", "8", "--processes", "8", "--hosts", "8"]
PORT = 29760
BOUND_S = 900


@pytest.fixture(scope="module")
def pod():
    if not TEST_DIR.is_dir():
        pytest.skip(f"no torch_xla v2.9.0 test directory at {TEST_DIR} (set XLA_TEST_DIR)")
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"pod tests need network namespaces: {reason}")
    machines = Machines(MACHINES)
    yield machines
    machines.close()


def _finish(process: subprocess.Popen, output: Path) -> dict:
    wait_succeeded(process, output, BOUND_S)
    return json.loads(Path(f"{output}.json").read_text())


@pytest.mark.parametrize("script", SCRIPTS)
def test_torch_xla_script_on_four_machines_as_on_one(pod, script, tmp_path):
    path = str(TEST_DIR / script)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("XLASIM_", "PYTEST_"))}
    env.pop("CPU_NUM_DEVICES", None)
    with open(tmp_path / "one.out", "w") as out, open(tmp_path / "one.err", "w") as err:
        one = subprocess.Popen(
            [sys.executable, "-m", "xlasim", "run", *SLICE, path],
            cwd=tmp_path,
            env={**env, "XLASIM_RUN_REPORT": str(tmp_path / "one.json")},
            stdout=out,
            stderr=err,
        )
    token = os.urandom(16).hex()
    machines = [
        pod.start(
            rank,
            [
                *[sys.executable, "-m", "xlasim", "run", *SLICE],
                *["--machines", str(MACHINES), "--machine-rank", str(rank)],
                *["--rendezvous", f"{pod.address(0)}:{PORT}", "--token", token, path],
            ],
            tmp_path / f"m{rank}",
            XLASIM_RUN_REPORT=str(tmp_path / f"m{rank}.json"),
        )
        for rank in range(MACHINES)
    ]
    reports = [_finish(process, tmp_path / f"m{rank}") for rank, process in enumerate(machines)]
    reference = _finish(one, tmp_path / "one")
    assert reference["launches"] >= 1 and sum(reference["collectives"].values()) >= 1
    for report in reports:
        assert (report["launches"], report["collectives"]) == (
            reference["launches"],
            reference["collectives"],
        )
    printed = sorted(
        line
        for rank in range(MACHINES)
        for line in (tmp_path / f"m{rank}.out").read_text().splitlines()
    )
    assert printed == sorted((tmp_path / "one.out").read_text().splitlines())
