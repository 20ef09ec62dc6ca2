"""torch_xla's cross-replica collectives, as its mp scripts exercise them, on a pod of 8
emulated hosts (a chip each) spread over 4 machines in network namespaces: our own
`scripts/mp_collectives.py` (one launch per family of torch_xla v2.9.0's `test/test_mp_*.py`
collective scripts: all_gather, all_to_all, collective_permute, mesh_reduce, reduce_scatter,
replication, collective_matmul; written here, every rank checking its own results) passes on
every machine, prints what the same slice prints on one machine, and every machine counts the
launches and collectives one machine counts (each machine's run report, `XLASIM_RUN_REPORT`):
the collectives really met across machines.

torch_xla's own scripts, unmodified, run in our script's place as a developer's command
(docs/pods.md, "Tested"): `POD_SCRIPTS="/path/to/xla/test/test_mp_all_gather.py ..." pytest
tests/pods/test_pod_conformance.py -m slow`. Needs namespaces (fails under CI without them). Slow: a few minutes (`-m slow`, CI step
"pods, mp collectives").
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fixtures.namespaces import Machines, require, wait_succeeded
from fixtures.pod_runs import XLASIM, pod_options, start_here

pytestmark = pytest.mark.slow

OURS = Path(__file__).parent / "scripts" / "mp_collectives.py"
#: What runs on the pod: our script, or the scripts a developer names (torch_xla's own).
SCRIPTS = [Path(path) for path in os.environ.get("POD_SCRIPTS", "").split()] or [OURS]
FAMILIES = [
    "all_gather",
    "all_to_all",
    "collective_permute",
    "mesh_reduce",
    "reduce_scatter",
    "replication",
    "collective_matmul",
]
MACHINES = 4
#: 8 hosts of one chip each (a process per chip): 2 hosts on each of the 4 machines.
SLICE = ["--devices", "8", "--processes", "8", "--hosts", "8"]
PORT = 29760
BOUND_S = 900


@pytest.fixture(scope="module")
def pod():
    require()
    machines = Machines(MACHINES)
    yield machines
    machines.close()


def _finish(process: subprocess.Popen, output: Path) -> dict:
    wait_succeeded(process, output, BOUND_S)
    return json.loads(Path(f"{output}.json").read_text())


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda path: path.stem)
def test_mp_collectives_on_four_machines_as_on_one(pod, tmp_path, script):
    one = start_here(
        [*XLASIM, *SLICE, str(script)],
        tmp_path / "one",
        XLASIM_RUN_REPORT=str(tmp_path / "one.json"),
    )
    token = os.urandom(16).hex()
    machines = [
        pod.start(
            rank,
            [*XLASIM, *SLICE, *pod_options(pod, rank, MACHINES, PORT, token), str(script)],
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
    expected = sorted((tmp_path / "one.out").read_text().splitlines())
    assert printed == expected
    if script != OURS:
        return
    assert reference["launches"] == len(FAMILIES), reference
    # Every rank checked and printed each family's results (the script raises on a wrong one).
    for family in FAMILIES:
        ranks = {line.split(":")[0] for line in expected if f": {family}/" in line}
        assert ranks == {f"rank {r}" for r in range(8)}, (family, ranks)
